package app

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ordertest"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

func headers(m kafkago.Message) map[string]string {
	hs := map[string]string{}
	for _, h := range m.Headers {
		hs[h.Key] = string(h.Value)
	}
	return hs
}

// A gateway answering 503 for a while: the event goes through the retry
// tiers with a growing x-attempt and is billed once when the gateway heals.
func TestGateway503ThenBilledOnce(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	gw.SetFault(func(_ gatewaystub.Call, n int) gatewaystub.Fault {
		if n <= 2 {
			return gatewaystub.Fault{Status: 503}
		}
		return gatewaystub.Fault{}
	})
	h := newHarness(t, gw, nil)
	e, m := event(t, "ord-503", "cus-1", 990)
	h.send(m)
	inv := h.waitInvoice("ord-503", order.StatusCharged)
	if inv.EventID != e.EventID || len(gw.ChargesForOrder("ord-503")) != 1 {
		t.Errorf("invoice key %s, %d charges; want %s and 1", inv.EventID, len(gw.ChargesForOrder("ord-503")), e.EventID)
	}
	poll.Until(t, "outcomes", 10*time.Second, func() bool { return h.outcome("charged") == 1 })
	if got := h.outcome("retried"); got != 2 {
		t.Errorf("retried = %d, want 2 (tier 1 and tier 2)", got)
	}
	for tier, want := range map[string]string{"billing.retry.1": "1", "billing.retry.2": "2"} {
		rec := kafkatest.ReadAll(t, h.brokers, tier, 1, 10*time.Second)[0]
		hs := headers(rec)
		if hs["x-attempt"] != want || hs["x-error-class"] != "transient" || hs["x-not-before"] == "" ||
			hs["x-original-topic"] != testTopic || string(rec.Value) != string(m.Value) {
			t.Errorf("%s record: headers %v", tier, hs)
		}
	}
}

// A gateway that always answers 503 sends the event to the DLQ after the
// last tier. Once the gateway heals, replaying the DLQ bills the order once,
// and replaying the same records again bills nothing more.
func TestAlways503ToDLQThenReplayTwice(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	healed := make(chan struct{})
	gw.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
		select {
		case <-healed:
			return gatewaystub.Fault{}
		default:
			return gatewaystub.Fault{Status: 503}
		}
	})
	h := newHarness(t, gw, nil)
	e, m := event(t, "ord-down", "cus-1", 1234)
	h.send(m)
	dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, 1, 15*time.Second)
	hs := headers(dlq[0])
	if hs["x-attempt"] != "2" || hs["x-error-class"] != "transient" || hs["x-original-topic"] != testTopic {
		t.Errorf("DLQ headers %v, want x-attempt 2 (both tiers tried), transient", hs)
	}
	poll.Until(t, "dead_lettered", 10*time.Second, func() bool { return h.outcome("dead_lettered") == 1 })
	close(healed)

	kc, err := kafkaclient.NewCluster(KafkaSettings(h.cfg))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	if n, err := replayed(ctx, kc, h.cfg.KafkaDLQTopic, testTopic, kafkain.ReplayOptions{Since: time.Now().Add(time.Hour)}, log); err != nil || n != 0 {
		t.Errorf("replay --since in the future: %d, %v; want 0", n, err)
	}
	if n, err := replayed(ctx, kc, h.cfg.KafkaDLQTopic, testTopic, kafkain.ReplayOptions{DryRun: true}, log); err != nil || n != 1 {
		t.Errorf("dry run: %d, %v; want 1", n, err)
	}
	for i := range 2 {
		n, err := replayed(ctx, kc, h.cfg.KafkaDLQTopic, testTopic, kafkain.ReplayOptions{Since: time.Now().Add(-time.Hour), Limit: 5}, log)
		if err != nil || n != 1 {
			t.Fatalf("replay %d: %d, %v; want 1", i+1, n, err)
		}
	}
	inv := h.waitInvoice("ord-down", order.StatusCharged)
	poll.Until(t, "both replays final", 10*time.Second, func() bool { return h.outcome("charged")+h.outcome("duplicate") == 2 })
	if charges := gw.ChargesForOrder("ord-down"); len(charges) != 1 || inv.EventID != e.EventID {
		t.Errorf("%d charges, invoice key %s; want 1 under %s", len(charges), inv.EventID, e.EventID)
	}
	// The replayed records are the originals, same bytes, without routing
	// headers; only the replay's mark is added, and the service counted
	// them as replays.
	main := kafkatest.ReadAll(t, h.brokers, testTopic, 3, 10*time.Second)
	for _, r := range main[1:] {
		hs := headers(r)
		_, marked := hs[kafkain.HeaderReplayedAt]
		if string(r.Value) != string(m.Value) || len(hs) != 1 || !marked {
			t.Errorf("replayed record %q with headers %v, want the original with x-replayed-at only", r.Value, hs)
		}
	}
	if got := testutil.ToFloat64(h.app.Metrics.ReplayedEvents.WithLabelValues("charged")) +
		testutil.ToFloat64(h.app.Metrics.ReplayedEvents.WithLabelValues("duplicate")); got != 2 {
		t.Errorf("billing_replayed_events_total{outcome=charged|duplicate} = %v, want the 2 replays", got)
	}
}

// Postgres stopped for 20 s mid-stream: consumption pauses, /readyz fails,
// nothing is routed to a retry tier or the DLQ, and once Postgres is back
// every event is billed once.
func TestPostgresOutageMidStream(t *testing.T) {
	t.Parallel()
	cl, pool := pgtest.NewMigratedCluster(t)
	ctx := context.Background()
	gw := gatewaystub.New(gatewaystub.Options{Latency: 10 * time.Millisecond})
	h := newHarnessOn(t, gw, pool, cl.DSN("postgres"), nil)
	var msgs []kafkago.Message
	for i := range 60 {
		_, m := event(t, fmt.Sprintf("ord-%03d", i), "cus-1", int64(100+i))
		msgs = append(msgs, m)
	}
	h.send(msgs[:20]...)
	poll.Until(t, "the first events billed", 15*time.Second, func() bool { return h.outcome("charged") >= 10 })

	if err := cl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h.send(msgs[20:]...)
	poll.Until(t, "the pause", 15*time.Second, func() bool {
		ready, _ := h.app.Ready()
		return !ready && testutil.ToFloat64(h.app.Metrics.ConsumerPaused) == 1
	})
	outage := time.NewTimer(20 * time.Second) // the outage lasts 20 s, by design of the test
	<-outage.C
	if ready, why := h.app.Ready(); ready {
		t.Error("ready during the outage")
	} else {
		t.Logf("during the outage /readyz says: %s", why)
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "every event billed", 60*time.Second, func() bool { return h.outcome("charged") == 60 })
	poll.Until(t, "the pause to end", 10*time.Second, func() bool { ready, _ := h.app.Ready(); return ready })
	for _, o := range []string{"retried", "dead_lettered"} {
		if got := h.outcome(o); got != 0 {
			t.Errorf("%s = %d during a Postgres outage, want 0", o, got)
		}
	}
	perOrder := chargedOnce(t, gw)
	if len(perOrder) != 60 {
		t.Errorf("%d orders charged, want 60", len(perOrder))
	}
	kafkatest.WaitCommitted(t, h.brokers, h.cfg.KafkaGroupID, testTopic, 15*time.Second)
}

// Shutdown under load: Run returns nil within the drain budget, commits what
// finished, and a new process bills the rest, none twice.
func TestShutdownMidStreamThenRestart(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{Latency: 20 * time.Millisecond})
	h := newHarness(t, gw, func(c *config.Config) { c.MaxInFlight = 4; c.ShutdownTimeout = 3 * time.Second })
	var msgs []kafkago.Message
	for i := range 200 {
		_, m := event(t, fmt.Sprintf("ord-%03d", i), "cus-1", int64(100+i))
		msgs = append(msgs, m)
	}
	h.send(msgs...)
	poll.Until(t, "work under way", 15*time.Second, func() bool { return h.outcome("charged") >= 30 })
	start := time.Now()
	h.shutdown()
	if d := time.Since(start); d > h.cfg.ShutdownTimeout+2*time.Second {
		t.Errorf("shutdown took %v, budget %v", d, h.cfg.ShutdownTimeout)
	}
	first := h.outcome("charged")
	if first >= 200 {
		t.Fatalf("all 200 billed before shutdown; the test needs work in flight")
	}
	t.Logf("billed %d before shutdown", first)
	h.start()
	kafkatest.WaitCommitted(t, h.brokers, h.cfg.KafkaGroupID, testTopic, 30*time.Second)
	invs, err := h.store.Invoices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(invs) != 200 {
		t.Errorf("%d invoices, want 200", len(invs))
	}
	for _, inv := range invs {
		if inv.Status != order.StatusCharged {
			t.Errorf("order %s is %s", inv.OrderID, inv.Status)
		}
	}
	chargedOnce(t, gw)
}

// Every record of the bad-record corpus ends in the DLQ with its raw bytes
// and headers, the consumer keeps going, and the good events sent after
// them are billed.
func TestBadRecordCorpusGoesToDLQ(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	corpus := ordertest.BadRecordCorpus()
	var msgs []kafkago.Message
	for _, b := range corpus {
		msgs = append(msgs, kafkago.Message{Key: []byte(b.Name), Value: b.Value})
	}
	w := kafkatest.NewWriter(t, h.brokers, testTopic)
	w.BatchBytes = 16 << 20
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	var good []kafkago.Message
	for i := range 5 {
		_, m := event(t, fmt.Sprintf("ord-good-%d", i), "cus-1", 100)
		good = append(good, m)
	}
	h.send(good...)
	for i := range 5 {
		h.waitInvoice(fmt.Sprintf("ord-good-%d", i), order.StatusCharged)
	}
	dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, len(corpus), 20*time.Second)
	byKey := map[string]kafkago.Message{}
	for _, m := range dlq {
		byKey[string(m.Key)] = m
	}
	for _, b := range corpus {
		m, ok := byKey[b.Name]
		if !ok {
			t.Errorf("%s: not in the DLQ", b.Name)
			continue
		}
		hs := headers(m)
		if string(m.Value) != string(b.Value) || hs["x-error-class"] != "permanent" || hs["x-attempt"] != "0" ||
			hs["x-error"] == "" || len(hs["x-error"]) > 1024 || hs["x-failed-at"] == "" || hs["x-original-offset"] == "" {
			t.Errorf("%s: %d bytes (sent %d), headers %v", b.Name, len(m.Value), len(b.Value), hs)
		}
	}
	if len(byKey) != len(corpus) {
		t.Errorf("DLQ holds %d records, want %d", len(byKey), len(corpus))
	}
	kafkatest.WaitCommitted(t, h.brokers, h.cfg.KafkaGroupID, testTopic, 15*time.Second)
}

// chargedOnce fails t for every order the gateway charged more than once,
// and returns the number of charges per order.
func chargedOnce(t *testing.T, gw *gatewaystub.Stub) map[string]int {
	t.Helper()
	perOrder := map[string]int{}
	for _, c := range gw.Charges() {
		perOrder[c.OrderID]++
	}
	for id, n := range perOrder {
		if n != 1 {
			t.Errorf("order %s charged %d times", id, n)
		}
	}
	return perOrder
}
