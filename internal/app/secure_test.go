package app

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// The service consumes from a broker that requires TLS and SASL/SCRAM; a
// wrong password stops it at start with a clear line that does not
// contain the password.
func TestKafkaTLSAndSCRAM(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{"scram-sha-256", "scram-sha-512", "plain"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			caFile, serverTLS := kafkatest.SelfSignedTLS(t)
			kc := kafkatest.NewFake(t, kafkatest.WithTLS(serverTLS), kafkatest.WithSASL(mech, "billing", "right-horse-battery"),
				kafkatest.WithTopics(2, testTopic, "billing.retry.1", "billing.dlq"))
			pool, dsn := pgtest.NewDB(t)
			gw := gatewaystub.New(gatewaystub.Options{})
			url := gw.StartTest(t)
			cfg := testConfig(kc.Brokers(), dsn, url)
			cfg.KafkaGroupID = "billing-secure"
			cfg.RetryDelays = cfg.RetryDelays[:1]
			cfg.KafkaTLSEnabled, cfg.KafkaTLSCAFile = true, caFile
			cfg.KafkaSASLMechanism, cfg.KafkaSASLUsername, cfg.KafkaSASLPassword = mech, "billing", "wrong-password-123"
			cfg.Normalize()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.DiscardHandler)
			ctx := context.Background()

			// New reaches nothing; Run's start-up checks find the refusal.
			bad, err := New(ctx, cfg, Tuning{Reader: kafkatest.FastReaderOptions()}, log)
			if err == nil {
				err = bad.Run(ctx)
			}
			if err == nil {
				t.Fatal("started with a wrong Kafka password")
			}
			if msg := err.Error(); !strings.Contains(msg, "BILLING_KAFKA_SASL_PASSWORD") || strings.Contains(msg, "wrong-password-123") || strings.Contains(msg, "\\n") {
				t.Errorf("error %q: want one line naming the variable without the password", msg)
			}

			cfg.KafkaSASLPassword = "right-horse-battery"
			runCtx, stop := context.WithCancel(ctx)
			a, err := New(runCtx, cfg, Tuning{Reader: kafkatest.FastReaderOptions(), CommitInterval: 50 * time.Millisecond}, log)
			if err != nil {
				stop()
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- a.Run(runCtx) }()
			t.Cleanup(func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})

			tr := kc.Transport(t, kafkatest.ClientTLS(t, caFile))
			w := &kafkago.Writer{Addr: kafkago.TCP(kc.Brokers()...), Topic: testTopic, Transport: tr,
				Balancer: &kafkago.Hash{}, RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond}
			t.Cleanup(func() { _ = w.Close() })
			_, m := event(t, "ord-secure", "cus-1", 100)
			if err := w.WriteMessages(ctx, m); err != nil {
				t.Fatal(err)
			}
			store := postgres.NewStore(pool)
			poll.Until(t, "the invoice", 15*time.Second, func() bool {
				invs, err := store.Invoices(ctx)
				return err == nil && len(invs) == 1 && invs[0].Status == order.StatusCharged
			})
		})
	}
}

// Planted secrets, one per kind docs/interface.md §2 names.
const (
	plantedDSNPassword  = "PgPl4nted-dsn-pw"
	plantedSASLPassword = "SaslPl4nted-pw"
	plantedGatewayPass  = "GwPl4nted-pw"
	plantedGatewayUser  = "svc-planted-user"
)

// planted are the planted secrets, with the gateway's credentials also as
// a gateway that echoes the request would show them: the base64 of the
// Basic Authorization header, and of the password alone.
var planted = []string{plantedDSNPassword, plantedSASLPassword, plantedGatewayPass, plantedGatewayUser,
	base64.StdEncoding.EncodeToString([]byte(plantedGatewayUser + ":" + plantedGatewayPass)),
	base64.StdEncoding.EncodeToString([]byte(plantedGatewayPass))}

// noSecrets fails the test for every planted secret found in text.
func noSecrets(t *testing.T, where, text string) {
	t.Helper()
	for _, s := range planted {
		if strings.Contains(text, s) {
			t.Errorf("%s contains the planted secret %q:\n%s", where, s, text)
		}
	}
}

// withPassword returns dsn with the planted password (the test clusters
// trust local connections, so it is sent and ignored).
func withPassword(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), plantedDSNPassword)
	return u.String()
}

func gatewayWithUserinfo(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(plantedGatewayUser, plantedGatewayPass)
	return u.String()
}

// newGatewayTLSHarness is newHarnessLogged against gw, served over https
// with the planted credentials in its URL; the service trusts gw's
// certificate through clientTLS.
func newGatewayTLSHarness(t *testing.T, gw *switchedGateway, clientTLS *tls.Config, pool *pgxpool.Pool, dsn string, logw io.Writer) *harness {
	t.Helper()
	kc := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, kc.Brokers(), 3, testTopic)
	cfg := testConfig(kc.Brokers(), dsn, gatewayWithUserinfo(t, gw.url()))
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, logw: logw, store: postgres.NewStore(pool), pool: pool, gw: gw.stub, brokers: kc.Brokers(), cfg: cfg}
	h.startWith(Tuning{Reader: kafkatest.FastReaderOptions(), CommitInterval: 50 * time.Millisecond,
		ProbeInterval: 200 * time.Millisecond, LagInterval: 200 * time.Millisecond, OutageBackoff: 50 * time.Millisecond,
		GatewayTLS: clientTLS})
	t.Cleanup(h.shutdown)
	return h
}

// Credentials in the gateway URL over plain http stop the service at start,
// with one line naming the variable and not the credentials.
func TestGatewayCredentialsNeedTLS(t *testing.T) {
	t.Parallel()
	cfg := testConfig([]string{"127.0.0.1:9"}, "postgres://billing@127.0.0.1:9/billing", gatewayWithUserinfo(t, "http://127.0.0.1:9"))
	err := cfg.Validate()
	if err == nil {
		t.Fatal("credentials over http accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "BILLING_PAYMENT_BASE_URL") || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line naming BILLING_PAYMENT_BASE_URL", msg)
	}
	noSecrets(t, "the configuration error", err.Error())
}

// refusedAddr returns a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// Every log line and error of runs with planted secrets (DSN password, SASL
// password, gateway user info) through each failure path: bad
// configuration, the configuration logged at start, SASLprep refusing the
// password, Postgres and Kafka unreachable at start, and the gateway
// refusing our credentials, failing, and refusing connections. None may
// show a secret (docs/interface.md §2), nor may a routed record's headers.
func TestPlantedSecretsNeverShow(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	secretDSN := withPassword(t, dsn)
	base := func(brokers []string, gateway string) config.Config {
		cfg := testConfig(brokers, secretDSN, gatewayWithUserinfo(t, gateway))
		cfg.KafkaSASLMechanism, cfg.KafkaSASLUsername, cfg.KafkaSASLPassword = "plain", "billing", plantedSASLPassword
		return cfg
	}

	t.Run("configuration", func(t *testing.T) {
		t.Parallel()
		cfg := base([]string{"127.0.0.1:9"}, "https://gateway.example/v1")
		var logs syncbuf.Buffer
		slog.New(slog.NewJSONHandler(&logs, nil)).Info("configuration", slog.Any("config", cfg))
		noSecrets(t, "the configuration log line", logs.String())
		if !strings.Contains(logs.String(), "gateway.example") {
			t.Errorf("configuration line %s: want the gateway host, masked user info", logs.String())
		}
		cfg.MaxInFlight = -1
		if err := cfg.Validate(); err == nil {
			t.Error("MaxInFlight -1 accepted")
		} else {
			noSecrets(t, "a configuration error", err.Error())
		}
	})

	t.Run("SASLprep refuses the password", func(t *testing.T) {
		t.Parallel()
		cfg := base([]string{"127.0.0.1:9"}, "https://127.0.0.1:9")
		cfg.KafkaSASLMechanism = "scram-sha-256"
		cfg.KafkaSASLPassword = plantedSASLPassword + "\u0007" // a control character: SASLprep prohibits it
		_, err := New(context.Background(), cfg, Tuning{}, slog.New(slog.DiscardHandler))
		if err == nil {
			t.Fatal("New accepted a password SASLprep refuses")
		}
		noSecrets(t, "the SASLprep error", err.Error())
		if !strings.Contains(err.Error(), "BILLING_KAFKA_SASL_PASSWORD") {
			t.Errorf("error %q: want it to name BILLING_KAFKA_SASL_PASSWORD", err)
		}
	})

	// startAndStop runs cfg until Ready names dep, then stops it.
	startAndStop := func(t *testing.T, cfg config.Config, dep string) {
		t.Helper()
		var logs syncbuf.Buffer
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		a, err := New(ctx, cfg, Tuning{Reader: kafkatest.FastReaderOptions()}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		poll.Until(t, "waiting for "+dep+" logged", 15*time.Second, func() bool {
			return strings.Contains(logs.String(), "waiting for "+dep)
		})
		stop()
		if err := <-done; err != nil {
			noSecrets(t, "Run's error", err.Error())
		}
		noSecrets(t, "the log", logs.String())
	}
	t.Run("postgres unreachable at start", func(t *testing.T) {
		t.Parallel()
		cfg := base([]string{"127.0.0.1:9"}, "https://127.0.0.1:9")
		cfg.DatabaseURL = config.Secret("postgres://billing:" + plantedDSNPassword + "@" + refusedAddr(t) + "/billing?sslmode=disable")
		startAndStop(t, cfg, "postgres")
	})
	t.Run("kafka unreachable at start", func(t *testing.T) {
		t.Parallel()
		cfg := base([]string{refusedAddr(t)}, "https://127.0.0.1:9")
		startAndStop(t, cfg, "kafka")
	})

	t.Run("gateway errors", func(t *testing.T) {
		t.Parallel()
		var logs syncbuf.Buffer
		// Over https: credentials in the URL need it (config.Validate).
		caFile, serverTLS := kafkatest.SelfSignedTLS(t)
		gw := newSwitchedGateway(t)
		gw.tls = serverTLS
		gw.up()
		pool, dsn := pgtest.NewDB(t)
		h := newGatewayTLSHarness(t, gw, kafkatest.ClientTLS(t, caFile), pool, withPassword(t, dsn), &logs)
		// 500 on every call, its message echoing the request's headers
		// (our Authorization header): through the tiers to the DLQ, with
		// the status in x-error and nothing of the echo (docs/interface.md §6).
		gw.stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
			return gatewaystub.Fault{Status: 500, EchoRequest: true}
		})
		_, m := event(t, "ord-secret-1", "cus-1", 100)
		h.send(m)
		dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, 1, 20*time.Second)
		for _, rec := range dlq {
			for _, hd := range rec.Headers {
				noSecrets(t, "DLQ header "+hd.Key, string(hd.Value))
				if hd.Key == "x-error" && (strings.Contains(string(hd.Value), "request headers") || !strings.Contains(string(hd.Value), "500")) {
					t.Errorf("x-error %q: want the status and none of the gateway's echo", hd.Value)
				}
			}
		}
		// Connections refused: an outage, logged with the error.
		gw.down()
		gw.stub.SetFault(nil)
		_, m = event(t, "ord-secret-2", "cus-1", 100)
		h.send(m)
		poll.Until(t, "refused connections logged", 15*time.Second, func() bool {
			return strings.Contains(logs.String(), "connection refused")
		})
		gw.up()
		h.waitInvoice("ord-secret-2", order.StatusCharged)
		// 401: an outage, logged with the gateway's answer (an echo).
		gw.stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
			return gatewaystub.Fault{Status: 401, EchoRequest: true}
		})
		_, m = event(t, "ord-secret-3", "cus-1", 100)
		h.send(m)
		poll.Until(t, "the 401 pause logged", 15*time.Second, func() bool { return strings.Contains(logs.String(), "credentials refused") })
		gw.stub.SetFault(nil)
		h.waitInvoice("ord-secret-3", order.StatusCharged)
		noSecrets(t, "the log", logs.String())
		if !strings.Contains(logs.String(), "127.0.0.1") {
			t.Error("the log never names the gateway's address; the test saw no gateway error")
		}
	})
}
