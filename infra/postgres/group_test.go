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
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/pgtest"
	"github.com/acme/billing/internal/poll"
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

// inGroups runs calls at once on a store of one runner per op
// (postgres.WithGroups(1)) with the invoice table locked: the first calls
// to reach the store go to the server as a group and wait on the lock,
// every later one queues behind them; when all of them are either sent
// (sizes) or queued, the lock goes and the queued calls leave together, in
// as few groups as the grouper's rules allow. It returns when every call
// has returned.
func inGroups(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sizes *groupSizes, op string, queued func() int, calls []func()) {
	t.Helper()
	unlock := lockInvoices(ctx, t, pool)
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(call)
	}
	poll.Until(t, fmt.Sprintf("%d %s calls at the server or queued", len(calls), op), 10*time.Second,
		func() bool { return sizes.sent(op)+queued() == len(calls) })
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
			res[i], errs[i] = store.Reserve(ctx, pendingInvoice(fmt.Sprintf("ord-%02d", i), newEventID(t)), groups[i%2])
		}
	}
	inGroups(ctx, t, pool, &sizes, "reserve", store.QueuedReserves, calls)

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
