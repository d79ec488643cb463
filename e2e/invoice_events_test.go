package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestInvoiceEventsAsADownstreamServiceSeesThem: the
// built binary bills a stream in which some orders are refused once (400:
// rejected, then reopened by their second event and charged), is killed
// twice with SIGKILL and loses Postgres for a while mid-stream. Read as a
// downstream service reads the invoice topic: every final invoice has
// exactly one distinct event id per transition (copies of an id are
// allowed: at least once), the last event's type is the invoice's status,
// an order's events come in the order of its transitions, no event names
// an order that was never invoiced, and each event carries the traceparent
// of a record of its order.
func TestInvoiceEventsAsADownstreamServiceSeesThem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cluster, pool := pgtest.NewMigratedCluster(t)
	e.dsn, e.store = cluster.DSN("postgres"), postgres.NewStore(pool)

	const orders = 600
	rng := rand.New(rand.NewPCG(3, 4))
	refusedKeys := map[string]bool{}
	traces := map[string]map[string]bool{} // order → the trace ids its records carry
	var firsts, seconds []kafkago.Message
	record := func(evt order.OrderConfirmedEvent) kafkago.Message {
		v, err := wire.Encode(evt)
		if err != nil {
			t.Fatal(err)
		}
		trace := fmt.Sprintf("%032x", rng.Uint64())
		if traces[evt.OrderID] == nil {
			traces[evt.OrderID] = map[string]bool{}
		}
		traces[evt.OrderID][trace] = true
		return kafkago.Message{Key: []byte(evt.OrderID), Value: v,
			Headers: []kafkago.Header{{Key: "traceparent", Value: []byte("00-" + trace + "-00f067aa0ba902b7-01")}}}
	}
	reopened := map[string]bool{}
	for i := range orders {
		evt, err := order.NewOrderConfirmedEvent(order.Order{ID: fmt.Sprintf("ord-%04d", i), CustomerID: "cus-1",
			TotalAmount: int64(100 + i), Currency: "EUR", ConfirmedAt: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		firsts = append(firsts, record(evt))
		if i%10 == 0 { // refused once, then reopened by a second event
			refusedKeys[evt.EventID.String()] = true
			reopened[evt.OrderID] = true
			again, err := order.NewOrderConfirmedEvent(order.Order{ID: evt.OrderID, CustomerID: "cus-1",
				TotalAmount: evt.TotalAmount + 1, Currency: "EUR", ConfirmedAt: time.Now().UTC()})
			if err != nil {
				t.Fatal(err)
			}
			seconds = append(seconds, record(again))
		}
	}
	e.gw.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		if refusedKeys[c.Key] {
			return gatewaystub.Fault{Status: 400}
		}
		return gatewaystub.Fault{}
	})
	e.gw.SetLatency(2 * time.Millisecond)
	e.produce(firsts)

	p := e.start("run")
	poll.Until(t, "150 invoices", 2*time.Minute, func() bool { return e.invoiceCount() >= 150 })
	// The killed process's group members are removed as their session's
	// end would remove them: what this test reads is the invoice events,
	// and TestEndToEndSurvivesSIGKILL waits a real session out.
	e.kill(p)
	kafkatest.EvictMembers(t, e.brokers, e.group)
	p = e.start("run")
	poll.Until(t, "300 invoices", 2*time.Minute, func() bool { return e.invoiceCount() >= 300 })
	// Postgres goes away mid-stream, and comes back.
	ctx := context.Background()
	if err := cluster.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "billing to pause", time.Minute, func() bool { return strings.Contains(p.out.String(), "consumption paused") })
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	e.produce(seconds) // the reopening events, while the stream goes on
	poll.Until(t, "450 invoices", 2*time.Minute, func() bool { return e.invoiceCount() >= 450 })
	e.kill(p)
	kafkatest.EvictMembers(t, e.brokers, e.group)
	p = e.start("run")
	poll.Until(t, "the group to commit every partition to its end", 3*time.Minute, e.caughtUp)
	invs := e.invoices()
	poll.Until(t, "every final invoice published", time.Minute, func() bool {
		st, err := e.store.OutboxStats(ctx)
		return err == nil && st.Pending == 0
	})
	e.stop(p)

	if len(invs) != orders {
		t.Fatalf("%d invoices, want %d", len(invs), orders)
	}
	type seen struct {
		ids   []string // distinct, in the order first read
		types map[string]string
		last  string
	}
	byOrder := map[string]*seen{}
	n := 0
	for _, m := range kafkatest.ReadAll(t, e.brokers, e.invoiceTopic, orders+len(seconds), time.Minute) {
		n++
		var v struct {
			EventID, EventType, OrderID, IdempotencyKey string
		}
		var raw struct {
			EventID        string `json:"event_id"`
			EventType      string `json:"event_type"`
			OrderID        string `json:"order_id"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		if err := json.Unmarshal(m.Value, &raw); err != nil {
			t.Fatalf("event %q: %v", m.Value, err)
		}
		v.EventID, v.EventType, v.OrderID, v.IdempotencyKey = raw.EventID, raw.EventType, raw.OrderID, raw.IdempotencyKey
		if string(m.Key) != v.OrderID {
			t.Errorf("event of %s keyed %q", v.OrderID, m.Key)
		}
		tp := ""
		for _, h := range m.Headers {
			if h.Key == "traceparent" {
				tp = string(h.Value)
			}
		}
		if parts := strings.Split(tp, "-"); len(parts) != 4 || !traces[v.OrderID][parts[1]] {
			t.Errorf("%s %s: traceparent %q, want one of its order's records'", v.OrderID, v.EventType, tp)
		}
		s := byOrder[v.OrderID]
		if s == nil {
			s = &seen{types: map[string]string{}}
			byOrder[v.OrderID] = s
		}
		if _, dup := s.types[v.EventID]; !dup {
			s.ids = append(s.ids, v.EventID)
		}
		s.types[v.EventID] = v.EventType
		s.last = v.EventType
	}
	for id, s := range byOrder {
		inv, ok := invs[id]
		if !ok {
			t.Errorf("events for %s, which was never invoiced", id)
			continue
		}
		var want []string
		if reopened[id] {
			// The first event's rejection, then one more for each time a
			// kill made it delivered again (it reopens the invoice under its
			// own key and is refused again: another transition), then the
			// second event's.
			var first uuid.UUID
			for _, m := range firsts {
				if string(m.Key) == id {
					evt, _ := wire.Decode(m.Value, "EUR")
					first = evt.EventID
				}
			}
			for r := range inv.Reopens {
				want = append(want, order.InvoiceEventID(id, first, order.StatusRejected, r).String())
			}
		}
		want = append(want, order.InvoiceEventID(id, inv.EventID, inv.Status, inv.Reopens).String())
		if strings.Join(s.ids, ",") != strings.Join(want, ",") {
			t.Errorf("%s (%s): event ids %v (%v), want %v", id, inv.Status, s.ids, s.types, want)
		}
		if s.last != string(order.EventTypeOf(inv.Status)) {
			t.Errorf("%s: last event %s, invoice %s", id, s.last, inv.Status)
		}
	}
	if len(byOrder) != orders {
		t.Errorf("events for %d orders, want every one of the %d", len(byOrder), orders)
	}
	t.Logf("%d event records read for %d orders (%d reopened)", n, len(byOrder), len(seconds))
}
