package postgres_test

import (
	"sync"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

func pendingInvoice(orderID string, eventID uuid.UUID) order.Invoice {
	return order.Invoice{OrderID: orderID, EventID: eventID, CustomerID: "cus-" + orderID, Amount: 12990, Currency: "EUR", Status: order.StatusPending}
}

// TestLedgerContract runs order.Ledger's contract (ledgertest) on a store
// of its own per scenario, one step after the other: the one path
// production runs (the grouped Reserve and Settle), each call alone.
func TestLedgerContract(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(t *testing.T) order.Ledger {
		pool, _ := pgtest.NewDB(t)
		return postgres.NewStore(pool)
	})
}

// TestOutboxContract runs order.Outbox's contract (ledgertest) on a store
// that publishes, one database per scenario.
func TestOutboxContract(t *testing.T) {
	t.Parallel()
	ledgertest.RunOutbox(t, func(t *testing.T) ledgertest.Store {
		pool, _ := pgtest.NewDB(t)
		return postgres.NewStore(pool, postgres.WithEvents(true))
	})
}

// TestPendingContract runs order.PendingLedger's contract (ledgertest) on
// a store that publishes, one database per scenario.
func TestPendingContract(t *testing.T) {
	t.Parallel()
	ledgertest.RunPending(t, func(t *testing.T) ledgertest.Store {
		pool, _ := pgtest.NewDB(t)
		return postgres.NewStore(pool, postgres.WithEvents(true))
	})
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

	_, err := store.Reserve(ctx, bad, group, terms)
	if err == nil {
		t.Fatal("Reserve(amount 0) error = nil, want a check violation")
	}
	if got := order.Classify(err); got != order.ClassPermanent {
		t.Errorf("Classify(%v) = %v, want permanent", err, got)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 0 {
		t.Errorf("ProcessedCount() = %d, %v, want 0: the failed reserve left its dedup row", n, err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-bad", id), group, terms)
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
			res[i], errs[i] = store.Reserve(ctx, pendingInvoice("ord-hot", ids[i%events]), group, terms)
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

// TestSettle: what Settle stores, beyond the contract's table.
func TestSettle(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	key := newEventID(t)
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", key), group, terms)
	if err != nil || r.Attempt == 0 {
		t.Fatalf("Reserve() = %+v, %v, want the attempt taken", r, err)
	}
	if ok, err := store.Settle(ctx, order.Settlement{OrderID: "ord-none", Key: key, Attempt: r.Attempt, Status: order.StatusCharged, ChargeID: "ch_2"}); err != nil || ok {
		t.Errorf("Settle(no invoice) = %v, %v, want false, nil", ok, err)
	}
	if ok, err := store.Settle(ctx, order.Settlement{OrderID: "ord-1", Key: key, Attempt: r.Attempt, Status: order.StatusCharged, ChargeID: "ch_1"}); err != nil || !ok {
		t.Errorf("Settle(charged) = %v, %v, want true, nil", ok, err)
	}
	r, err = store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
	if err != nil || r.Invoice.Status != order.StatusCharged || r.Invoice.ChargeID != "ch_1" {
		t.Errorf("Reserve after settle = %+v, %v, want the charged invoice with ch_1", r, err)
	}

	// A decline (or a rejection) without a charge id stores NULL; a
	// rejection's reason is kept, a charge has none.
	declined, rejectedKey := newEventID(t), newEventID(t)
	for id, st := range map[uuid.UUID]order.Settlement{
		declined:    {OrderID: "ord-2", Status: order.StatusDeclined},
		rejectedKey: {OrderID: "ord-3", Status: order.StatusRejected, Reason: "400 Bad Request"},
	} {
		r, err := store.Reserve(ctx, pendingInvoice(st.OrderID, id), group, terms)
		if err != nil {
			t.Fatal(err)
		}
		st.Key, st.Attempt = id, r.Attempt
		if ok, err := store.Settle(ctx, st); err != nil || !ok {
			t.Errorf("Settle(%s) = %v, %v, want true, nil", st.Status, ok, err)
		}
	}
	var nullCharge, nullReason bool
	if err := pool.QueryRow(ctx, "SELECT charge_id IS NULL, reason IS NULL FROM invoice WHERE order_id = 'ord-2'").Scan(&nullCharge, &nullReason); err != nil || !nullCharge || !nullReason {
		t.Errorf("charge_id and reason of a decline without charge id are NULL = %v, %v, %v; want true", nullCharge, nullReason, err)
	}
	if inv := invoiceOf(ctx, t, store, "ord-3"); inv.Reason != "400 Bad Request" {
		t.Errorf("rejected invoice's reason = %q, want the refusal", inv.Reason)
	}
}
