package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// groupSizes records the size of every group a Store sends, by op.
type groupSizes struct {
	mu    sync.Mutex
	sizes map[string][]int
}

func (g *groupSizes) option() postgres.StoreOption {
	return postgres.WithGroupObserver(func(op string, n int) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.sizes == nil {
			g.sizes = map[string][]int{}
		}
		g.sizes[op] = append(g.sizes[op], n)
	})
}

// largest returns the size of op's largest group so far (0 when none).
func (g *groupSizes) largest(op string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.sizes[op]) == 0 {
		return 0
	}
	return slices.Max(g.sizes[op])
}

// sent returns how many requests of op went to the server so far.
func (g *groupSizes) sent(op string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, k := range g.sizes[op] {
		n += k
	}
	return n
}

func (g *groupSizes) of(op string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes[op])
}

// lockInvoices takes LOCK TABLE invoice IN EXCLUSIVE MODE in a transaction
// of its own on pool, so that every reserve and settle blocks at the server
// (reads go on), until the returned unlock is called (or the test ends).
func lockInvoices(ctx context.Context, t *testing.T, pool *pgxpool.Pool) (unlock func()) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE invoice IN EXCLUSIVE MODE`); err != nil {
		rollbackTx(ctx, tx)
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { rollbackTx(ctx, tx) }) }
	t.Cleanup(unlock)
	return unlock
}

// inGroups runs calls (reserves, settles) at once on store, which has one
// runner per op (postgres.WithGroups(1)) and reports its groups to sizes,
// with the invoice table locked: the first calls of each op to reach the
// store go to the server as a group and wait on the lock, every later one
// queues behind them; when every call is either sent or queued, the lock
// goes and the queued calls leave together, in as few groups as the
// grouper's rules allow. It returns when every call has returned.
func inGroups(ctx context.Context, t *testing.T, pool *pgxpool.Pool, store *postgres.Store, sizes *groupSizes, calls []func()) {
	t.Helper()
	sent := func() int { return sizes.sent("reserve") + sizes.sent("settle") }
	before := sent()
	unlock := lockInvoices(ctx, t, pool)
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(call)
	}
	poll.Until(t, fmt.Sprintf("%d calls at the server or queued", len(calls)), 10*time.Second, func() bool {
		return sent()-before+store.QueuedReserves()+store.QueuedSettles() == len(calls)
	})
	unlock()
	wg.Wait()
}

// TestReservesOfOneConsumerGroupShareAGroup: concurrent reserves of the
// service's one consumer group go to the server as one group statement, and
// reserves of two consumer groups never share one (the statement takes one
// group): each event's dedup row is written under its own group.
func TestReservesOfOneConsumerGroupShareAGroup(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	var sizes groupSizes
	store := postgres.NewStore(pool, postgres.WithGroups(1), sizes.option())
	const n = 12
	groups := []string{group, "other-group"}
	res := make([]order.Reservation, n)
	errs := make([]error, n)
	calls := make([]func(), n)
	for i := range calls {
		calls[i] = func() {
			res[i], errs[i] = store.Reserve(ctx, pendingInvoice(fmt.Sprintf("ord-%02d", i), newEventID(t)), groups[i%2], terms)
		}
	}
	inGroups(ctx, t, pool, store, &sizes, calls)

	for i := range n {
		if errs[i] != nil || !res[i].FirstSeen || !res[i].Found || res[i].Invoice.Status != order.StatusPending {
			t.Errorf("Reserve %d = %+v, %v, want first seen, pending", i, res[i], errs[i])
		}
	}
	for _, g := range groups {
		if got, err := store.ProcessedCount(ctx, g); err != nil || got != n/2 {
			t.Errorf("ProcessedCount(%s) = %d, %v, want %d: a dedup row went under another group", g, got, err, n/2)
		}
	}
	// The first group at the server is of one consumer group, so the other
	// group's reserves all queued behind it, and went as one.
	if got := sizes.of("reserve"); sizes.largest("reserve") < n/2 {
		t.Errorf("reserve groups %v, want the queued reserves of a consumer group in one group", got)
	}
}

// TestGroupFailureStaysWithItsEvent: one event of a group cannot be written;
// the group fails as a whole at the server, and its events are sent again
// alone: the bad one gets its error, every neighbour its own answer.
func TestGroupFailureStaysWithItsEvent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	var sizes groupSizes
	store := postgres.NewStore(pool, postgres.WithGroups(1), sizes.option())
	const n, bad = 8, 5
	invs := make([]order.Invoice, n)
	for i := range invs {
		invs[i] = pendingInvoice(fmt.Sprintf("ord-%02d", i), newEventID(t))
	}
	invs[bad].Amount = 0 // violates the invoice's CHECK (amount > 0)
	res := make([]order.Reservation, n)

	t.Run("reserve", func(t *testing.T) {
		errs := make([]error, n)
		calls := make([]func(), n)
		for i := range calls {
			calls[i] = func() { res[i], errs[i] = store.Reserve(ctx, invs[i], group, terms) }
		}
		inGroups(ctx, t, pool, store, &sizes, calls)
		if sizes.largest("reserve") < 2 {
			t.Fatalf("reserve groups %v, want one of more than one", sizes.of("reserve"))
		}
		for i := range n {
			if i == bad {
				if order.Classify(errs[i]) != order.ClassPermanent {
					t.Errorf("Reserve(amount 0) error = %v, want a permanent error", errs[i])
				}
				continue
			}
			r := res[i]
			if errs[i] != nil || !r.FirstSeen || !r.Found || r.Reopened || r.Invoice.Status != order.StatusPending ||
				r.Invoice.EventID != invs[i].EventID || r.Invoice.OrderID != invs[i].OrderID || r.Invoice.Amount != invs[i].Amount {
				t.Errorf("Reserve(%s) = %+v, %v, want first seen, pending under its own key", invs[i].OrderID, r, errs[i])
			}
		}
		if got, err := store.ProcessedCount(ctx, group); err != nil || got != n-1 {
			t.Errorf("ProcessedCount() = %d, %v, want %d: the bad event's dedup row rolled back, the others' kept", got, err, n-1)
		}
	})

	// Settle: a charge id that Postgres cannot store as text (a NUL byte:
	// a gateway's garbage) fails the group statement the same way.
	t.Run("settle", func(t *testing.T) {
		invs[bad].Amount = 12990
		var err error
		if res[bad], err = store.Reserve(ctx, invs[bad], group, terms); err != nil {
			t.Fatal(err)
		}
		settled := make([]bool, n)
		errs := make([]error, n)
		calls := make([]func(), n)
		chargeID := func(i int) string {
			if i == bad {
				return "ch-\x00"
			}
			return fmt.Sprintf("ch-%02d", i)
		}
		for i := range calls {
			calls[i] = func() {
				settled[i], errs[i] = store.Settle(ctx, order.Settlement{OrderID: invs[i].OrderID, Key: invs[i].EventID,
					Attempt: res[i].Attempt, Status: order.StatusCharged, ChargeID: chargeID(i)})
			}
		}
		inGroups(ctx, t, pool, store, &sizes, calls)
		if sizes.largest("settle") < 2 {
			t.Fatalf("settle groups %v, want one of more than one", sizes.of("settle"))
		}
		got, err := store.Invoices(ctx)
		if err != nil || len(got) != n {
			t.Fatalf("Invoices() = %d, %v, want %d", len(got), err, n)
		}
		for i, inv := range got { // by order id: ord-00…
			if i == bad {
				if errs[i] == nil || inv.Status != order.StatusPending {
					t.Errorf("Settle(charge id with NUL) = %v, %v, invoice %s; want an error, the invoice pending", settled[i], errs[i], inv.Status)
				}
				continue
			}
			if errs[i] != nil || !settled[i] || inv.Status != order.StatusCharged || inv.ChargeID != chargeID(i) {
				t.Errorf("Settle(%s) = %v, %v, invoice %s %q; want settled, charged with %s", inv.OrderID, settled[i], errs[i], inv.Status, inv.ChargeID, chargeID(i))
			}
		}
	})
}

// TestLedgerContractInGroups runs every scenario of order.Ledger's
// contract (ledgertest) at once on one store, step by step: step i of every
// scenario is issued together (orders namespaced per scenario), its
// reserves and settles forced into groups, and each must give what the
// scenario expects of it alone. The calls that are never grouped (takes,
// releases, settles refused before they reach the server) go first, on
// their own.
func TestLedgerContractInGroups(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	var sizes groupSizes
	store := postgres.NewStore(pool, postgres.WithGroups(1), sizes.option())
	scenarios := ledgertest.Scenarios()
	runs := make([]*ledgertest.Runner, len(scenarios))
	longest := 0
	for j, sc := range scenarios {
		runs[j] = ledgertest.NewRunner(t, fmt.Sprintf("s%02d-", j), sc)
		longest = max(longest, len(sc.Steps))
	}
	broken := make([]bool, len(scenarios)) // a step failed to run: skip the rest
	for i := range longest {
		var grouped, alone []func()
		for j, sc := range scenarios {
			if i >= len(sc.Steps) || broken[j] {
				continue
			}
			call := func() {
				if !runs[j].Step(ctx, t, store, i, sc.Steps[i]) {
					broken[j] = true
				}
			}
			if sc.Steps[i].Grouped() {
				grouped = append(grouped, call)
			} else {
				alone = append(alone, call)
			}
		}
		var wg sync.WaitGroup
		for _, call := range alone {
			wg.Go(call)
		}
		wg.Wait()
		inGroups(ctx, t, pool, store, &sizes, grouped)
	}
	if sizes.largest("reserve") < 2 || sizes.largest("settle") < 2 {
		t.Errorf("groups %v, want reserves and settles in groups of more than one", sizes.of("reserve"))
	}
	t.Logf("reserve groups %v, settle groups %v", sizes.of("reserve"), sizes.of("settle"))
}
