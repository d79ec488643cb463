package postgres_test

import (
	"context"
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

// ledgerStep is one call of the Ledger contract table: a Reserve of event
// (by name) for order (amount as given) in group ("" = the test group), or
// a Settle of order under event's key when settle is set; and what it must
// report.
type ledgerStep struct {
	event, order string
	amount       int64
	group        string
	settle       order.InvoiceStatus

	first, found, reopened bool   // Reserve
	key                    string // Reserve: the invoice's key (event name)
	status                 order.InvoiceStatus
	settled                bool // Settle
}

// ledgerScenario is a row of the Ledger contract table: steps run in order
// on a database of their own (TestLedgerContract), or beside the other
// scenarios' steps in groups (TestLedgerContractInGroups).
type ledgerScenario struct {
	name  string
	steps []ledgerStep
}

// ledgerContract is order.Ledger's contract against Postgres: CONTRACT.md
// §4 as the ledger sees it. core/order's TestBillRules reads the same rules
// over an in-memory ledger.
func ledgerContract() []ledgerScenario {
	reserve := func(event, orderID string, amount int64) ledgerStep {
		return ledgerStep{event: event, order: orderID, amount: amount}
	}
	expect := func(s ledgerStep, first, found, reopened bool, key string, status order.InvoiceStatus) ledgerStep {
		s.first, s.found, s.reopened, s.key, s.status = first, found, reopened, key, status
		return s
	}
	settle := func(event, orderID string, status order.InvoiceStatus, settled bool) ledgerStep {
		return ledgerStep{event: event, order: orderID, settle: status, settled: settled}
	}
	inGroup := func(s ledgerStep, g string) ledgerStep { s.group = g; return s }
	const P, C, R = order.StatusPending, order.StatusCharged, order.StatusRejected
	return []ledgerScenario{
		{"first time", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P)}},
		{"duplicate", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			expect(reserve("E1", "A", 100), false, true, false, "E1", P)}},
		{"duplicate by order", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", C, true),
			expect(reserve("E2", "A", 200), true, true, false, "E1", C)}},
		{"another group dedups apart, shares the invoice", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			expect(inGroup(reserve("E1", "A", 100), "other-group"), true, true, false, "E1", P)}},
		{"reused id for another order opens nothing", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			expect(reserve("E1", "B", 500), false, false, false, "", "")}},
		{"a key another order's invoice holds opens nothing, even first seen", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			expect(inGroup(reserve("E1", "B", 500), "other-group"), true, false, false, "", "")}},
		{"pending resumed under its key", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			expect(reserve("E2", "A", 200), true, true, false, "E1", P)}},
		{"422 pending stays under its key on a replay", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			expect(reserve("E1", "A", 100), false, true, false, "E1", P),
			expect(reserve("E2", "A", 100), true, true, false, "E1", P)}},
		{"rejected reopened by a new event", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", R, true),
			expect(reserve("E2", "A", 777), true, true, true, "E2", P)}},
		{"rejected reopened by the replay of its event", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", R, true),
			expect(reserve("E1", "A", 100), false, true, true, "E1", P)}},
		{"rejected stays for a seen id that is not its key", []ledgerStep{
			expect(reserve("E2", "B", 500), true, true, false, "E2", P),
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", R, true),
			expect(reserve("E2", "A", 300), false, true, false, "E1", R)}},
		{"rejected stays for a key another invoice holds", []ledgerStep{
			expect(reserve("E2", "B", 500), true, true, false, "E2", P),
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", R, true),
			expect(inGroup(reserve("E2", "A", 300), "other-group"), true, true, false, "E1", R)}},
		{"a late answer to the old key settles nothing after a reopen", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", R, true),
			expect(reserve("E2", "A", 200), true, true, true, "E2", P),
			settle("E1", "A", C, false),
			settle("E2", "A", C, true),
			expect(reserve("E3", "A", 300), true, true, false, "E2", C)}},
		{"final stays final", []ledgerStep{
			expect(reserve("E1", "A", 100), true, true, false, "E1", P),
			settle("E1", "A", order.StatusDeclined, true),
			settle("E1", "A", C, false),
			settle("E1", "A", R, false),
			expect(reserve("E1", "A", 100), false, true, false, "E1", order.StatusDeclined)}},
	}
}

// ledgerRun runs one scenario's steps on a store: event names become fresh
// ids, order ids get prefix (so that scenarios can share a database).
type ledgerRun struct {
	prefix string
	ids    map[string]uuid.UUID
	names  map[uuid.UUID]string
}

// newLedgerRun makes the ids of every event the scenario names, up front,
// so that its steps may run on other goroutines.
func newLedgerRun(t *testing.T, prefix string, sc ledgerScenario) *ledgerRun {
	t.Helper()
	r := &ledgerRun{prefix: prefix, ids: map[string]uuid.UUID{}, names: map[uuid.UUID]string{}}
	for _, s := range sc.steps {
		if _, ok := r.ids[s.event]; !ok {
			r.ids[s.event] = newEventID(t)
			r.names[r.ids[s.event]] = s.event
		}
	}
	return r
}

// step runs step i (from 0) and reports, with t.Errorf, where it differs
// from its expectation; false when it could not run (an error).
func (r *ledgerRun) step(ctx context.Context, t *testing.T, store *postgres.Store, i int, s ledgerStep) bool {
	orderID := r.prefix + s.order
	if s.settle != "" {
		ok, err := store.Settle(ctx, orderID, r.ids[s.event], s.settle, "ch-"+s.event)
		if err != nil || ok != s.settled {
			t.Errorf("step %d: Settle(%s, key %s, %s) = %v, %v, want %v", i+1, orderID, s.event, s.settle, ok, err, s.settled)
			return err == nil
		}
		return true
	}
	g := group
	if s.group != "" {
		g = s.group
	}
	inv := pendingInvoice(orderID, r.ids[s.event])
	inv.Amount = s.amount
	res, err := store.Reserve(ctx, inv, g)
	if err != nil {
		t.Errorf("step %d: Reserve(%s of %s) error = %v", i+1, s.event, orderID, err)
		return false
	}
	if res.FirstSeen != s.first || res.Found != s.found || res.Reopened != s.reopened ||
		r.names[res.Invoice.EventID] != s.key || res.Invoice.Status != s.status {
		t.Errorf("step %d: Reserve(%s of %s) = first %v found %v reopened %v, %s under %s; want %v %v %v, %s under %s",
			i+1, s.event, orderID, res.FirstSeen, res.Found, res.Reopened, res.Invoice.Status, r.names[res.Invoice.EventID],
			s.first, s.found, s.reopened, s.status, s.key)
	}
	if res.Found && res.Invoice.EventID == inv.EventID && (res.Invoice.Amount != s.amount || res.Invoice.CustomerID != inv.CustomerID) {
		t.Errorf("step %d: invoice %+v, want the amount and customer of %s", i+1, res.Invoice, s.event)
	}
	if res.Found && (res.Invoice.OrderID != orderID || res.Invoice.CreatedAt.IsZero()) {
		t.Errorf("step %d: invoice %+v, want order %s's with its created_at", i+1, res.Invoice, orderID)
	}
	return true
}

// TestLedgerContract runs each scenario of ledgerContract on a store of
// its own, one step after the other: the one path production runs (the
// grouped Reserve and Settle), each call alone.
func TestLedgerContract(t *testing.T) {
	t.Parallel()
	for _, tt := range ledgerContract() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, _ := pgtest.NewDB(t)
			store := postgres.NewStore(pool)
			r := newLedgerRun(t, "", tt)
			for i, s := range tt.steps {
				if !r.step(ctx, t, store, i, s) {
					t.FailNow()
				}
			}
		})
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
	if _, err := store.Settle(ctx, "ord-1", key, "refunded", ""); order.Classify(err) != order.ClassPermanent {
		t.Errorf("Settle(refunded) error = %v, want a permanent error", err)
	}

	// A decline (or a rejection) without a charge id stores NULL.
	declined := newEventID(t)
	if _, err := store.Reserve(ctx, pendingInvoice("ord-2", declined), group); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Settle(ctx, "ord-2", declined, order.StatusDeclined, ""); err != nil || !ok {
		t.Errorf("Settle(declined) = %v, %v, want true, nil", ok, err)
	}
	var nullCharge bool
	if err := pool.QueryRow(ctx, "SELECT charge_id IS NULL FROM invoice WHERE order_id = 'ord-2'").Scan(&nullCharge); err != nil || !nullCharge {
		t.Errorf("charge_id of a decline without charge id is NULL = %v, %v; want true", nullCharge, err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group)
	if err != nil || r.Invoice.Status != order.StatusCharged || r.Invoice.ChargeID != "ch_1" {
		t.Errorf("Reserve after settle = %+v, %v, want the charged invoice with ch_1", r, err)
	}
}
