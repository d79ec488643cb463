package postgres_test

import (
	"sync"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/pgtest"
)

func pendingInvoice(orderID string, eventID uuid.UUID) order.Invoice {
	return order.Invoice{OrderID: orderID, EventID: eventID, CustomerID: "cus-" + orderID, Amount: 12990, Currency: "EUR", Status: order.StatusPending}
}

// TestReserve: the pipelined reserve transaction reports a new dedup row
// once, and always returns the order's first invoice.
func TestReserve(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	first, second := newEventID(t), newEventID(t)

	r, err := store.Reserve(ctx, pendingInvoice("ord-1", first), group)
	if err != nil {
		t.Fatalf("Reserve(first) error = %v", err)
	}
	if !r.FirstSeen || !r.Found || r.Invoice.EventID != first || r.Invoice.Status != order.StatusPending ||
		r.Invoice.Amount != 12990 || r.Invoice.CustomerID != "cus-ord-1" || r.Invoice.CreatedAt.IsZero() {
		t.Errorf("Reserve(first) = %+v, want first seen, the new pending invoice under the first event", r)
	}

	r, err = store.Reserve(ctx, pendingInvoice("ord-1", first), group)
	if err != nil || r.FirstSeen || !r.Found || r.Invoice.EventID != first {
		t.Errorf("Reserve(first) again = %+v, %v, want not first seen, the same invoice", r, err)
	}

	r, err = store.Reserve(ctx, pendingInvoice("ord-1", second), group)
	if err != nil || !r.FirstSeen || !r.Found || r.Invoice.EventID != first {
		t.Errorf("Reserve(second event, same order) = %+v, %v, want first seen, the invoice of the first event", r, err)
	}

	// Another consumer group has its own dedup rows, not its own invoices.
	r, err = store.Reserve(ctx, pendingInvoice("ord-1", first), "other-group")
	if err != nil || !r.FirstSeen || r.Invoice.EventID != first {
		t.Errorf("Reserve(first, other group) = %+v, %v, want first seen, the same invoice", r, err)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 2 {
		t.Errorf("ProcessedCount() = %d, %v, want 2", n, err)
	}
}

// TestReserveIsAtomic: when a later statement of the pipeline fails, the
// dedup row of the earlier one is not committed either — a redelivery must
// find the event new, not a duplicate of something never billed.
func TestReserveIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	id := newEventID(t)
	bad := pendingInvoice("ord-bad", id)
	bad.Amount = 0 // violates the invoice's CHECK (amount > 0)

	_, err := store.Reserve(ctx, bad, group)
	if err == nil {
		t.Fatal("Reserve(amount 0) error = nil, want a check violation")
	}
	if got := order.Classify(err); got != order.ClassPermanent {
		t.Errorf("Classify(%v) = %v, want permanent", err, got)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 0 {
		t.Errorf("ProcessedCount() = %d, %v, want 0: the failed reserve left its dedup row", n, err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-bad", id), group)
	if err != nil || !r.FirstSeen || !r.Found {
		t.Errorf("Reserve(fixed) = %+v, %v, want first seen", r, err)
	}
}

// TestReserveConcurrent: many events of one order reserved at once (each
// delivered twice): each event is first seen exactly once, and all of them
// get the same invoice, the one whose event won.
func TestReserveConcurrent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	const events = 10
	ids := newEventIDs(t, events)

	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		res   = make([]order.Reservation, 2*events)
		errs  = make([]error, 2*events)
	)
	for i := range 2 * events {
		wg.Go(func() {
			<-start
			res[i], errs[i] = store.Reserve(ctx, pendingInvoice("ord-hot", ids[i%events]), group)
		})
	}
	close(start)
	wg.Wait()

	firstSeen := map[uuid.UUID]int{}
	key := res[0].Invoice.EventID
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("Reserve %d error = %v", i, errs[i])
		}
		if res[i].FirstSeen {
			firstSeen[ids[i%events]]++
		}
		if !res[i].Found || res[i].Invoice.EventID != key {
			t.Errorf("Reserve %d = %+v, want the invoice under %s", i, res[i], key)
		}
	}
	for _, id := range ids {
		if firstSeen[id] != 1 {
			t.Errorf("event %s first seen %d times, want 1", id, firstSeen[id])
		}
	}
	invs, err := store.Invoices(ctx)
	if err != nil || len(invs) != 1 {
		t.Errorf("Invoices() = %d, %v, want 1", len(invs), err)
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	key := newEventID(t)
	if _, err := store.Reserve(ctx, pendingInvoice("ord-1", key), group); err != nil {
		t.Fatal(err)
	}

	if ok, err := store.Settle(ctx, "ord-1", newEventID(t), order.StatusCharged, "ch_0"); err != nil || ok {
		t.Errorf("Settle(charged) under another key = %v, %v, want false, nil", ok, err)
	}
	if _, err := store.Settle(ctx, "ord-1", key, order.StatusPending, ""); order.Classify(err) != order.ClassPermanent {
		t.Errorf("Settle(pending) error = %v, want a permanent error", err)
	}
	if ok, err := store.Settle(ctx, "ord-1", key, order.StatusCharged, "ch_1"); err != nil || !ok {
		t.Errorf("Settle(charged) = %v, %v, want true, nil", ok, err)
	}
	if ok, err := store.Settle(ctx, "ord-1", key, order.StatusDeclined, ""); err != nil || ok {
		t.Errorf("Settle(declined) after charged = %v, %v, want false, nil (final stays final)", ok, err)
	}
	if ok, err := store.Settle(ctx, "ord-none", key, order.StatusCharged, "ch_2"); err != nil || ok {
		t.Errorf("Settle(no invoice) = %v, %v, want false, nil", ok, err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group)
	if err != nil || r.Invoice.Status != order.StatusCharged || r.Invoice.ChargeID != "ch_1" {
		t.Errorf("Reserve after settle = %+v, %v, want the charged invoice with ch_1", r, err)
	}
}
