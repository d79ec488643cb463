package order_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

func TestInvoiceEventID(t *testing.T) {
	t.Parallel()
	key := uuid.Must(uuid.NewV7())
	id := order.InvoiceEventID("ord-1", key, order.StatusCharged, 0)
	if id.Version() != 7 || id.Variant() != uuid.VariantRFC9562 {
		t.Errorf("id %s: version %d variant %d, want a UUIDv7", id, id.Version(), id.Variant())
	}
	if [6]byte(id[:6]) != [6]byte(key[:6]) {
		t.Errorf("id %s does not carry the key's timestamp %s", id, key)
	}
	if again := order.InvoiceEventID("ord-1", key, order.StatusCharged, 0); again != id {
		t.Errorf("the same transition gave %s, then %s", id, again)
	}
	for _, other := range []uuid.UUID{
		order.InvoiceEventID("ord-2", key, order.StatusCharged, 0),
		order.InvoiceEventID("ord-1", uuid.Must(uuid.NewV7()), order.StatusCharged, 0),
		order.InvoiceEventID("ord-1", key, order.StatusRejected, 0),
		// the same status reached again after a reopen is a new transition
		order.InvoiceEventID("ord-1", key, order.StatusCharged, 1),
	} {
		if other == id {
			t.Errorf("another transition has the id %s", id)
		}
	}
}

// TestEncodeInvoiceEvent is CONTRACT.md §9's record value.
func TestEncodeInvoiceEvent(t *testing.T) {
	t.Parallel()
	key := uuid.Must(uuid.FromString("0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"))
	at := time.Date(2026, 12, 2, 10, 0, 1, 250_000_000, time.FixedZone("CET", 3600))
	base := order.InvoiceEvent{OrderID: "ord-123", CustomerID: "cus-9", Amount: 12990, Currency: "EUR", IdempotencyKey: key, OccurredAt: at,
		ChargeID: "ch_1", Reason: "400 Bad Request:\n  amount\ttoo large " + strings.Repeat("x", 300)}
	for _, tc := range []struct {
		status     order.InvoiceStatus
		wantType   string
		wantCharge bool
		wantReason bool
	}{
		{order.StatusCharged, "InvoiceCharged", true, false},
		{order.StatusDeclined, "InvoiceDeclined", false, false},
		{order.StatusRejected, "InvoiceRejected", false, true},
		{order.StatusHeld, "InvoiceHeld", false, true},
	} {
		e := base
		e.Status = tc.status
		e.EventID = order.InvoiceEventID(e.OrderID, key, tc.status, 0)
		raw, err := order.EncodeInvoiceEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got["event_id"] != e.EventID.String() || got["event_type"] != tc.wantType || got["occurred_at"] != "2026-12-02T09:00:01.250Z" ||
			got["order_id"] != "ord-123" || got["customer_id"] != "cus-9" || got["amount"] != 12990.0 || got["currency"] != "EUR" ||
			got["idempotency_key"] != key.String() {
			t.Errorf("%s: %s", tc.status, raw)
		}
		if _, ok := got["charge_id"]; ok != tc.wantCharge {
			t.Errorf("%s: charge_id present %v, want %v: %s", tc.status, ok, tc.wantCharge, raw)
		}
		reason, ok := got["reason"].(string)
		if ok != tc.wantReason || (ok && (len(reason) > 256 || strings.ContainsAny(reason, "\n\t") || !strings.HasPrefix(reason, "400 Bad Request: amount too large"))) {
			t.Errorf("%s: reason %q, want one line of at most 256 bytes: %v", tc.status, reason, tc.wantReason)
		}
	}
	if _, err := order.EncodeInvoiceEvent(order.InvoiceEvent{Status: order.StatusPending}); err == nil {
		t.Error("a pending invoice's event encoded")
	}
}

// fakeOutbox hands out events until none are left; publish failures keep
// them.
type fakeOutbox struct {
	mu      sync.Mutex
	waiting []order.InvoiceEvent
}

func (o *fakeOutbox) PublishPending(ctx context.Context, limit int, publish func(context.Context, []order.InvoiceEvent) error) (int, error) {
	o.mu.Lock()
	batch := o.waiting[:min(limit, len(o.waiting))]
	o.mu.Unlock()
	if len(batch) == 0 {
		return 0, nil
	}
	if err := publish(ctx, batch); err != nil {
		return 0, err
	}
	o.mu.Lock()
	o.waiting = o.waiting[len(batch):]
	o.mu.Unlock()
	return len(batch), nil
}

func (o *fakeOutbox) OutboxStats(context.Context) (order.OutboxStats, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return order.OutboxStats{Pending: len(o.waiting)}, nil
}

// flakyPublisher fails its first calls, then takes everything.
type flakyPublisher struct {
	mu    sync.Mutex
	fails int
	got   int
	done  chan struct{}
	want  int
}

func (p *flakyPublisher) Publish(_ context.Context, events []order.InvoiceEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fails > 0 {
		p.fails--
		return errors.New("kafka: leader not available")
	}
	p.got += len(events)
	if p.got == p.want {
		close(p.done)
	}
	return nil
}

// The relay's loop goes on through failed passes and publishes everything
// once the publisher takes it, in batches; Stop ends it.
func TestOutboxRelayLoop(t *testing.T) {
	t.Parallel()
	ob := &fakeOutbox{}
	for range 25 {
		ob.waiting = append(ob.waiting, order.InvoiceEvent{Status: order.StatusCharged})
	}
	p := &flakyPublisher{fails: 3, want: 25, done: make(chan struct{})}
	var (
		mu        sync.Mutex
		published int
		stats     []int
	)
	r := order.NewOutboxRelay(ob, p, order.RelayOptions{Batch: 10, Idle: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		StatsEvery: time.Millisecond,
		Published: func(es []order.InvoiceEvent, _ time.Time) {
			mu.Lock()
			published += len(es)
			mu.Unlock()
		},
		Stats: func(s order.OutboxStats) {
			mu.Lock()
			stats = append(stats, s.Pending)
			mu.Unlock()
		}})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay never published everything")
	}
	r.Stop()
	mu.Lock()
	defer mu.Unlock()
	if published != 25 || len(stats) == 0 || stats[0] != 25 {
		t.Errorf("published %d, stats %v; want 25 and a first count of 25", published, stats)
	}
}
