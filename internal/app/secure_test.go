package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/gatewaystub"
	"github.com/acme/billing/internal/kafkatest"
	"github.com/acme/billing/internal/pgtest"
	"github.com/acme/billing/internal/poll"
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
			url, err := gw.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gw.Close)
			cfg := testConfig(kc.Brokers(), dsn, url)
			cfg.KafkaGroupID = "billing-secure"
			cfg.RetryDelays = cfg.RetryDelays[:1]
			cfg.KafkaTLSEnabled, cfg.KafkaTLSCAFile = true, caFile
			cfg.KafkaSASLMechanism, cfg.KafkaSASLUsername, cfg.KafkaSASLPassword = mech, "billing", "wrong-password-123"
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			log := slog.New(slog.NewJSONHandler(io.Discard, nil))
			ctx := context.Background()

			// New reaches nothing; Run's start-up checks find the refusal.
			bad, err := New(ctx, cfg, Tuning{Reader: FastReader()}, log)
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
			a, err := New(runCtx, cfg, Tuning{Reader: FastReader(), CommitInterval: 50 * time.Millisecond}, log)
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
