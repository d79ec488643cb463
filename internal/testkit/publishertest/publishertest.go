// Package publishertest is the contract of order.EventPublisher, run on
// every publisher and every broker it is meant for (in the manner of
// watermill's pubsub tests and core/order/ledgertest): what the outbox
// relay and the services that read the invoice topic may count on (README,
// "What billing tells others"). One record per event, keyed by its order
// so that an order's events share a partition and keep their order, the
// event as JSON, the traceparent of its cause as a header; all of a call's
// events acknowledged, or an error.
//
// adapters/out/kafka runs it on the in-process broker and on the real one.
package publishertest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// Record is a record read back from the topic.
type Record struct {
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Header is one header of a Record.
type Header struct {
	Key   string
	Value []byte
}

// Harness is one publisher under test, built afresh for each scenario on a
// topic of its own.
type Harness struct {
	// Publisher publishes to the topic Read reads.
	Publisher order.EventPublisher
	// Read waits until the topic holds at least n records (failing t after
	// a generous while) and returns every record it holds then, ordered by
	// partition and offset.
	Read func(t *testing.T, n int) []Record
	// Unwritable publishes to a topic that cannot be written (it does not
	// exist, and the cluster does not create it).
	Unwritable order.EventPublisher
}

// NewHarness builds a Harness for one scenario; it registers its own
// cleanup on t.
type NewHarness func(t *testing.T) Harness

type scenario struct {
	name string
	run  func(ctx context.Context, t *testing.T, h Harness)
}

var scenarios = []scenario{
	{"each event is one record keyed by its order, the event as JSON", testEachEvent},
	{"the cause's traceparent is a header, and only when there is one", testTraceParent},
	{"an order's events share a partition and keep their order", testOrderOfEvents},
	{"an empty call writes nothing", testEmpty},
	{"an event that cannot be written as JSON fails the call", testUnencodable},
	{"a topic that cannot be written fails the call", testUnwritable},
	{"calls at once are all acknowledged", testAtOnce},
}

// Run runs every scenario, each a parallel subtest with a harness of its
// own.
func Run(t *testing.T, newHarness NewHarness) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			sc.run(ctx, t, newHarness(t))
		})
	}
}

// Event returns an event of orderID's transition into status under a new
// key, as the outbox hands it over.
func Event(t testing.TB, orderID string, status order.InvoiceStatus) order.InvoiceEvent {
	t.Helper()
	key, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	e := order.InvoiceEvent{
		EventID: order.InvoiceEventID(orderID, key, status, 0), Status: status,
		OccurredAt: time.Date(2026, 12, 2, 10, 0, 0, 123_000_000, time.UTC),
		OrderID:    orderID, CustomerID: "cus-" + orderID, Amount: 12990, Currency: "EUR", IdempotencyKey: key,
	}
	switch status {
	case order.StatusCharged:
		e.ChargeID = "ch_" + orderID
	case order.StatusRejected, order.StatusHeld:
		e.Reason = "400 Bad Request: amount too large"
	}
	return e
}

// value is an event record's value; pointers tell a member's absence.
type value struct {
	EventID        *string `json:"event_id"`
	EventType      *string `json:"event_type"`
	OccurredAt     *string `json:"occurred_at"`
	OrderID        *string `json:"order_id"`
	CustomerID     *string `json:"customer_id"`
	Amount         *int64  `json:"amount"`
	Currency       *string `json:"currency"`
	IdempotencyKey *string `json:"idempotency_key"`
	ChargeID       *string `json:"charge_id"`
	Reason         *string `json:"reason"`
}

// wantRecord fails t unless r is e's record.
func wantRecord(t *testing.T, r Record, e order.InvoiceEvent) {
	t.Helper()
	if string(r.Key) != e.OrderID {
		t.Errorf("record of %s keyed %q, want its order id", e.OrderID, r.Key)
	}
	var v value
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Errorf("record of %s: value %q is not JSON: %v", e.OrderID, r.Value, err)
		return
	}
	str := func(p *string) string {
		if p == nil {
			return "<absent>"
		}
		return *p
	}
	got := fmt.Sprintf("%s %s %s %s %s %s", str(v.EventID), str(v.EventType), str(v.OrderID), str(v.CustomerID),
		str(v.Currency), str(v.IdempotencyKey))
	want := fmt.Sprintf("%s %s %s %s %s %s", e.EventID, e.Type(), e.OrderID, e.CustomerID, e.Currency, e.IdempotencyKey)
	if got != want {
		t.Errorf("record of %s: %s, want %s", e.OrderID, got, want)
	}
	if v.Amount == nil || *v.Amount != e.Amount {
		t.Errorf("record of %s: amount %v, want %d", e.OrderID, v.Amount, e.Amount)
	}
	if at, err := time.Parse(time.RFC3339Nano, str(v.OccurredAt)); err != nil || !at.Equal(e.OccurredAt) {
		t.Errorf("record of %s: occurred_at %s, want %s in RFC 3339", e.OrderID, str(v.OccurredAt), e.OccurredAt)
	}
	if wantCharge := e.Status == order.StatusCharged; (v.ChargeID != nil) != wantCharge || (wantCharge && *v.ChargeID != e.ChargeID) {
		t.Errorf("%s of %s: charge_id %s, want it only on a charge: %q", e.Type(), e.OrderID, str(v.ChargeID), e.ChargeID)
	}
	if wantReason := e.Status == order.StatusRejected || e.Status == order.StatusHeld; (v.Reason != nil) != wantReason ||
		(wantReason && *v.Reason != e.Reason) {
		t.Errorf("%s of %s: reason %s, want it only on a rejection or a hold: %q", e.Type(), e.OrderID, str(v.Reason), e.Reason)
	}
}

// byOrder indexes records by their key.
func byOrder(rs []Record) map[string][]Record {
	out := map[string][]Record{}
	for _, r := range rs {
		out[string(r.Key)] = append(out[string(r.Key)], r)
	}
	return out
}

func publish(ctx context.Context, t *testing.T, p order.EventPublisher, events ...order.InvoiceEvent) {
	t.Helper()
	if err := p.Publish(ctx, events); err != nil {
		t.Fatalf("Publish(%d events) error = %v", len(events), err)
	}
}

func testEachEvent(ctx context.Context, t *testing.T, h Harness) {
	events := []order.InvoiceEvent{Event(t, "ord-c", order.StatusCharged), Event(t, "ord-d", order.StatusDeclined),
		Event(t, "ord-r", order.StatusRejected), Event(t, "ord-h", order.StatusHeld)}
	charged := Event(t, "ord-x", order.StatusCharged)
	charged.ChargeID = "" // a 409 without a charge id
	events = append(events, charged)
	publish(ctx, t, h.Publisher, events...)
	got := byOrder(h.Read(t, len(events)))
	for _, e := range events {
		rs := got[e.OrderID]
		if len(rs) != 1 {
			t.Errorf("%d records of %s, want 1", len(rs), e.OrderID)
			continue
		}
		if e.ChargeID == "" && e.Status == order.StatusCharged {
			var v value
			if err := json.Unmarshal(rs[0].Value, &v); err != nil || v.ChargeID != nil {
				t.Errorf("InvoiceCharged without a charge id: value %s, want no charge_id member", rs[0].Value)
			}
			continue
		}
		wantRecord(t, rs[0], e)
	}
}

func testTraceParent(ctx context.Context, t *testing.T, h Harness) {
	traced, plain := Event(t, "ord-traced", order.StatusCharged), Event(t, "ord-plain", order.StatusCharged)
	traced.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	publish(ctx, t, h.Publisher, traced, plain)
	got := byOrder(h.Read(t, 2))
	if rs := got["ord-traced"]; len(rs) != 1 || len(rs[0].Headers) != 1 || rs[0].Headers[0].Key != "traceparent" ||
		string(rs[0].Headers[0].Value) != traced.TraceParent {
		t.Errorf("the traced event's records %+v, want one with the traceparent header alone", rs)
	}
	if rs := got["ord-plain"]; len(rs) != 1 || len(rs[0].Headers) != 0 {
		t.Errorf("the untraced event's records %+v, want one without headers", rs)
	}
}

func testOrderOfEvents(ctx context.Context, t *testing.T, h Harness) {
	orders := []string{"ord-a", "ord-b", "ord-c", "ord-d"}
	want := map[string][]uuid.UUID{}
	const rounds = 5
	for range rounds {
		var call []order.InvoiceEvent
		for _, id := range orders {
			e := Event(t, id, order.StatusRejected)
			want[id] = append(want[id], e.EventID)
			call = append(call, e)
		}
		publish(ctx, t, h.Publisher, call...)
	}
	for id, rs := range byOrder(h.Read(t, rounds*len(orders))) {
		var got []uuid.UUID
		for _, r := range rs {
			if r.Partition != rs[0].Partition {
				t.Errorf("%s: records on partitions %d and %d, want one", id, rs[0].Partition, r.Partition)
			}
			var v value
			if err := json.Unmarshal(r.Value, &v); err != nil || v.EventID == nil {
				t.Fatalf("%s: value %q: %v", id, r.Value, err)
			}
			got = append(got, uuid.FromStringOrNil(*v.EventID))
		}
		if !slices.Equal(got, want[id]) {
			t.Errorf("%s: events %v in offset order, want %v, the order they were published in", id, got, want[id])
		}
	}
}

func testEmpty(ctx context.Context, t *testing.T, h Harness) {
	publish(ctx, t, h.Publisher)
	e := Event(t, "ord-1", order.StatusCharged)
	publish(ctx, t, h.Publisher, e)
	if got := h.Read(t, 1); len(got) != 1 {
		t.Errorf("the topic holds %d records, want the one event's only", len(got))
	}
}

func testUnencodable(ctx context.Context, t *testing.T, h Harness) {
	pending := Event(t, "ord-1", order.StatusCharged)
	pending.Status = order.StatusPending // a pending invoice publishes nothing
	if err := h.Publisher.Publish(ctx, []order.InvoiceEvent{pending}); err == nil {
		t.Error("Publish(an event of a pending invoice) error = nil, want one")
	}
}

func testUnwritable(ctx context.Context, t *testing.T, h Harness) {
	if err := h.Unwritable.Publish(ctx, []order.InvoiceEvent{Event(t, "ord-1", order.StatusCharged)}); err == nil {
		t.Error("Publish to a topic that cannot be written: error = nil, want one (the outbox keeps the event)")
	}
	if ctx.Err() != nil {
		t.Error("Publish to a topic that cannot be written returned only when the test's time was up")
	}
}

func testAtOnce(ctx context.Context, t *testing.T, h Harness) {
	const callers, each = 4, 10
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		want = map[uuid.UUID]bool{}
		errs = make([]error, callers)
	)
	for c := range callers {
		var events []order.InvoiceEvent
		for i := range each {
			e := Event(t, fmt.Sprintf("ord-%d-%d", c, i), order.StatusDeclined)
			events = append(events, e)
			mu.Lock()
			want[e.EventID] = true
			mu.Unlock()
		}
		wg.Go(func() { errs[c] = h.Publisher.Publish(ctx, events) })
	}
	wg.Wait()
	for c, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", c, err)
		}
	}
	for _, r := range h.Read(t, callers*each) {
		var v value
		if err := json.Unmarshal(r.Value, &v); err == nil && v.EventID != nil {
			delete(want, uuid.FromStringOrNil(*v.EventID))
		}
	}
	if len(want) != 0 {
		t.Errorf("%d acknowledged events not on the topic", len(want))
	}
}
