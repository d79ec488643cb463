package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestMain stops the real broker the real-broker tests share
// (kafkatest.SharedReal) as well as the Postgres cluster.
func TestMain(m *testing.M) { pgtest.Exit(kafkatest.AfterShared(pgtest.Run(m))) }

const testTopic = "orders.order-confirmed.v1"

// harness is one in-process billing against the in-process broker, a real
// Postgres database of its own and the gateway stub.
type harness struct {
	t       *testing.T
	app     *App
	store   *postgres.Store
	pool    *pgxpool.Pool
	gw      *gatewaystub.Stub
	brokers []string
	cfg     config.Config
	stop    context.CancelFunc
	done    chan error
	logw    io.Writer // also receives the log, when not nil
}

func newHarness(t *testing.T, gw *gatewaystub.Stub, mutate func(*config.Config)) *harness {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	return newHarnessOn(t, gw, pool, dsn, mutate)
}

// newHarnessOn is newHarness on a database the test provides.
func newHarnessOn(t *testing.T, gw *gatewaystub.Stub, pool *pgxpool.Pool, dsn string, mutate func(*config.Config)) *harness {
	t.Helper()
	return newHarnessLogged(t, gw, pool, dsn, mutate, nil)
}

// newHarnessLogged is newHarnessOn with the service's JSON log lines (debug
// level and up) written to logw as well.
func newHarnessLogged(t *testing.T, gw *gatewaystub.Stub, pool *pgxpool.Pool, dsn string, mutate func(*config.Config), logw io.Writer) *harness {
	t.Helper()
	// Records up to 8 MiB, so that the over-1-MiB bad record can be
	// published and dead-lettered like on a broker configured for it.
	kc := kafkatest.NewFake(t, kafkatest.WithKfake(kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8388608"})))
	kafkatest.CreateTopics(t, kc.Brokers(), 3, testTopic)
	if gw == nil {
		gw = gatewaystub.New(gatewaystub.Options{})
	}
	url := gw.StartTest(t)
	cfg := testConfig(kc.Brokers(), dsn, url)
	if mutate != nil {
		mutate(&cfg)
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, logw: logw, store: postgres.NewStore(pool), pool: pool, gw: gw, brokers: kc.Brokers(), cfg: cfg}
	h.start()
	t.Cleanup(h.shutdown)
	return h
}

// testConfig is a valid configuration for tests: short retry delays and
// timeouts, an HTTP port picked by the kernel.
func testConfig(brokers []string, dsn, gatewayURL string) config.Config {
	return config.Config{
		Kafka: config.Kafka{
			KafkaBrokers: brokers, KafkaTopic: testTopic, KafkaGroupID: "billing-test",
			KafkaRetryTopicPrefix: "billing.retry", KafkaDLQTopic: "billing.dlq", KafkaClientID: "test", KafkaInvoiceTopic: "billing.invoices",
			RetryDelays: []config.Duration{config.Duration(100 * time.Millisecond), config.Duration(200 * time.Millisecond)},
		},
		Database: config.Database{DatabaseURL: config.Secret(dsn)},
		Gateway:  config.Gateway{PaymentBaseURL: gatewayURL},
		Rules:    config.Rules{PaymentTimeout: 2 * time.Second, PendingResumeAfter: 15 * time.Minute, GatewayKeyTTL: 24 * time.Hour},
		Service: config.Service{DefaultCurrency: "USD", MaxInFlight: 8, DedupRetention: 168 * time.Hour, HTTPAddr: "127.0.0.1:0",
			ShutdownTimeout: 5 * time.Second},
		Log: config.Log{LogLevel: "debug"},
	}
}

// start runs a new App (a new process, as far as Kafka and Postgres can
// tell) with the harness's configuration.
func (h *harness) start() {
	h.t.Helper()
	h.startWith(Tuning{Reader: kafkatest.FastReaderOptions(), CommitInterval: 50 * time.Millisecond,
		ProbeInterval: 200 * time.Millisecond, LagInterval: 200 * time.Millisecond, OutageBackoff: 50 * time.Millisecond,
		GateInterval: 200 * time.Millisecond, SwitchInterval: 200 * time.Millisecond})
}

// startWith is start with other tuning.
func (h *harness) startWith(tune Tuning) {
	h.t.Helper()
	w := io.Discard
	if testing.Verbose() {
		w = testWriter{h.t}
	}
	if h.logw != nil {
		w = io.MultiWriter(w, h.logw)
	}
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := context.WithCancel(context.Background())
	a, err := New(ctx, h.cfg, tune, log)
	if err != nil {
		stop()
		h.t.Fatal(err)
	}
	h.app, h.stop, h.done = a, stop, make(chan error, 1)
	go func() { h.done <- a.Run(ctx) }()
}

func (h *harness) shutdown() {
	h.stop()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
		h.done <- nil // later calls return at once
	case <-time.After(20 * time.Second):
		h.t.Error("Run did not return within 20s of cancel")
	}
}

func (h *harness) send(msgs ...kafkago.Message) {
	h.t.Helper()
	w := kafkatest.NewWriter(h.t, h.brokers, testTopic)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) outcome(o string) int {
	return int(testutil.ToFloat64(h.app.Metrics.Events.WithLabelValues(o)))
}

func (h *harness) waitInvoice(orderID string, status order.InvoiceStatus) order.Invoice {
	h.t.Helper()
	var got order.Invoice
	poll.Until(h.t, "invoice "+orderID+" "+string(status), 20*time.Second, func() bool {
		invs, err := h.store.Invoices(context.Background())
		if err != nil {
			return false
		}
		for _, inv := range invs {
			if inv.OrderID == orderID && inv.Status == status {
				got = inv
				return true
			}
		}
		return false
	})
	return got
}

func event(t *testing.T, orderID, customer string, amount int64) (order.OrderConfirmedEvent, kafkago.Message) {
	t.Helper()
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: orderID, CustomerID: customer, TotalAmount: amount,
		Currency: "EUR", ConfirmedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	v, err := wire.Encode(evt)
	if err != nil {
		t.Fatal(err)
	}
	return evt, kafkago.Message{Key: []byte(orderID), Value: v}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestChargeDuplicateAndDecline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	e1, m1 := event(t, "ord-1", "cus-1", 1299)
	_, m2 := event(t, "ord-1", "cus-1", 1299) // second event_id, same order
	_, m3 := event(t, "ord-2", "declined-7", 500)
	h.send(m1, m1, m2, m3)

	inv := h.waitInvoice("ord-1", order.StatusCharged)
	h.waitInvoice("ord-2", order.StatusDeclined)
	poll.Until(t, "four outcomes", 10*time.Second, func() bool {
		return h.outcome("charged")+h.outcome("duplicate")+h.outcome("duplicate_order")+h.outcome("declined") == 4
	})
	if inv.EventID != e1.EventID {
		t.Errorf("invoice key = %s, want the first event %s", inv.EventID, e1.EventID)
	}
	for o, want := range map[string]int{"charged": 1, "duplicate": 1, "duplicate_order": 1, "declined": 1} {
		if got := h.outcome(o); got != want {
			t.Errorf("billing_events_total{outcome=%q} = %d, want %d", o, got, want)
		}
	}
	if n := len(h.gw.ChargesForOrder("ord-1")); n != 1 {
		t.Errorf("ord-1 charged %d times, want 1", n)
	}
	// The pool the four events went through: its size is the configured
	// one, and each event took at least one connection from it.
	pool := h.gathered("billing_db_pool_")
	if got, want := pool["billing_db_pool_max_connections"], float64(h.cfg.DBMaxConns); got != want || want == 0 {
		t.Errorf("billing_db_pool_max_connections = %v, want %v", got, want)
	}
	if got := pool["billing_db_pool_acquires_total"]; got < 4 {
		t.Errorf("billing_db_pool_acquires_total = %v, want at least one per event (4)", got)
	}
	if total, acq := pool["billing_db_pool_connections"], pool["billing_db_pool_acquired_connections"]; total < 1 || acq > total || total > float64(h.cfg.DBMaxConns) {
		t.Errorf("billing_db_pool connections: %v open, %v in use, at most %d", total, acq, h.cfg.DBMaxConns)
	}
	for _, n := range []string{"billing_db_pool_empty_acquires_total", "billing_db_pool_empty_acquire_wait_seconds_total"} {
		if _, ok := pool[n]; !ok {
			t.Errorf("/metrics lacks %s", n)
		}
	}
}

// gathered returns the value of every unlabelled gauge and counter the
// App's registry gathers whose name starts with prefix.
func (h *harness) gathered(prefix string) map[string]float64 {
	h.t.Helper()
	mfs, err := h.app.Metrics.Gathered.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), prefix) || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			out[mf.GetName()] = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			out[mf.GetName()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// The gateway charges, then resets the connection before replying. The
// event goes to a retry tier and is charged again with the same key: the
// gateway replays the first charge. With a second event for the same order
// right behind, that second event resumes the pending invoice under the
// first event's key. Either way: one charge, under the first key.
func TestResetAfterChargeBillsOnce(t *testing.T) {
	t.Parallel()
	for _, withSecond := range []bool{false, true} {
		t.Run(fmt.Sprintf("second_event=%v", withSecond), func(t *testing.T) {
			t.Parallel()
			gw := gatewaystub.New(gatewaystub.Options{})
			gw.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
				if n == 1 {
					return gatewaystub.Fault{ResetAfterCharge: true}
				}
				return gatewaystub.Fault{}
			})
			h := newHarness(t, gw, nil)
			e1, m1 := event(t, "ord-reset", "cus-1", 4200)
			msgs := []kafkago.Message{m1}
			if withSecond {
				_, m2 := event(t, "ord-reset", "cus-1", 4200)
				msgs = append(msgs, m2)
			}
			h.send(msgs...)
			inv := h.waitInvoice("ord-reset", order.StatusCharged)
			poll.Until(t, "every event final", 10*time.Second, func() bool {
				return h.outcome("charged")+h.outcome("duplicate")+h.outcome("duplicate_order") == len(msgs)
			})
			charges := gw.ChargesForOrder("ord-reset")
			if len(charges) != 1 {
				t.Fatalf("%d charges, want 1: %+v", len(charges), charges)
			}
			if charges[0].Key != e1.EventID.String() || inv.EventID != e1.EventID {
				t.Errorf("charged under %s, invoice key %s; want the first event's %s", charges[0].Key, inv.EventID, e1.EventID)
			}
			for _, c := range gw.Calls() {
				if c.Key != e1.EventID.String() {
					t.Errorf("gateway called with key %s, want only %s", c.Key, e1.EventID)
				}
			}
			if len(gw.Calls()) < 2 {
				t.Errorf("gateway saw %d calls, want the reset one and a retry", len(gw.Calls()))
			}
		})
	}
}

func TestMalformedGoesToDLQWithRawBytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	bad := []byte(`{"event_id":"not-a-uuid"}`)
	_, good := event(t, "ord-after", "cus-1", 100)
	h.send(kafkago.Message{Key: []byte("k-bad"), Value: bad, Headers: []kafkago.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}, good)
	h.waitInvoice("ord-after", order.StatusCharged)
	got := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, 1, 10*time.Second)
	if string(got[0].Value) != string(bad) || string(got[0].Key) != "k-bad" {
		t.Errorf("DLQ record = %q/%q, want the raw bytes", got[0].Key, got[0].Value)
	}
	hs := map[string]string{}
	for _, hd := range got[0].Headers {
		hs[hd.Key] = string(hd.Value)
	}
	if hs["x-error-class"] != "permanent" || hs["x-attempt"] != "0" || hs["x-original-topic"] != testTopic ||
		hs["x-consumer-group"] != "billing-test" || !strings.Contains(hs["x-error"], "event_id") || hs["traceparent"] == "" {
		t.Errorf("DLQ headers = %v", hs)
	}
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	poll.Until(t, "the HTTP server", 5*time.Second, func() bool { return h.app.HTTPAddr() != "" })
	base := "http://" + h.app.HTTPAddr()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	poll.Until(t, "/readyz 200", 10*time.Second, func() bool { code, _ := get("/readyz"); return code == 200 })
	_, body := get("/metrics")
	for _, name := range []string{"billing_events_total", "billing_handle_duration_seconds", "billing_in_flight",
		"billing_consumer_paused", "billing_dedup_partitions", "go_goroutines", "process_resident_memory_bytes",
		"billing_invoices_pending", "billing_invoice_pending_oldest_seconds"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// A traceparent on the record reaches the gateway request (as a child span
// of the same trace) and stays on the DLQ record.
func TestTraceParentCarriedToGatewayAndDLQ(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	gw.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault { return gatewaystub.Fault{Status: 422} })
	h := newHarness(t, gw, nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	_, m := event(t, "ord-traced", "cus-1", 700)
	m.Headers = []kafkago.Header{{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")}}
	h.send(m)
	dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, 1, 10*time.Second)
	var got string
	for _, hd := range dlq[0].Headers {
		if hd.Key == "traceparent" {
			got = string(hd.Value)
		}
	}
	if !strings.Contains(got, traceID) {
		t.Errorf("DLQ traceparent = %q, want trace %s", got, traceID)
	}
	// Tracing is off here (no Tuning.Tracer): billing records no span, so
	// it passes the record's traceparent on as it came; a span id of its own
	// would name a parent no back end ever receives. With tracing on the
	// gateway sees the client span's id (internal/telemetry's span tree test).
	calls := gw.Calls()
	if len(calls) != 1 || calls[0].TraceParent != "00-"+traceID+"-00f067aa0ba902b7-01" {
		t.Errorf("gateway calls %+v: want one request carrying the record's traceparent", calls)
	}
}
