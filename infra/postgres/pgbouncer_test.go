package postgres_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgbouncertest"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// advisoryLocksHeld counts the advisory locks granted on the server right
// now, seen directly (not through the pooler).
func advisoryLocksHeld(ctx context.Context, t *testing.T, direct *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateThroughPgBouncer: `billing migrate` from several processes at
// once through PgBouncer in transaction mode applies each file once and
// leaves no advisory lock behind. A session-level lock is taken on
// whichever server connection the pooler lends for that one statement and
// stays there when it lends that connection to someone else.
func TestMigrateThroughPgBouncer(t *testing.T) {
	want := embeddedVersions(t)
	const rounds = 3
	for round := range rounds {
		ctx := testCtx(t)
		direct, dsn := pgtest.NewEmptyDB(t)
		b := pgbouncertest.Start(t, dsn, pgbouncertest.Options{PoolSize: 4})
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  [3]error
		)
		for i := range errs {
			pool, err := postgres.NewPool(ctx, b.DSN(t, dsn), 2)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			wg.Go(func() {
				<-start
				errs[i] = postgres.Migrate(ctx, pool)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: Migrate() %d through PgBouncer error = %v", round, i, err)
			}
		}
		if got := appliedVersions(ctx, t, direct); !slices.Equal(got, want) {
			t.Errorf("round %d: schema_migrations = %v, want each of %v once", round, got, want)
		}
		if n := advisoryLocksHeld(ctx, t, direct); n != 0 {
			t.Errorf("round %d: %d advisory locks still held after Migrate through PgBouncer, want 0", round, n)
		}
		if t.Failed() {
			return
		}
	}
}

// TestMaintainersThroughPgBouncer: dedup maintenance through PgBouncer in
// transaction mode: passes of several processes at once create each
// partition once, leave no advisory lock behind, and a later pass is not
// skipped for a lock nobody holds any more.
func TestMaintainersThroughPgBouncer(t *testing.T) {
	ctx := testCtx(t)
	direct, dsn := pgtest.NewDB(t)
	b := pgbouncertest.Start(t, dsn, pgbouncertest.Options{PoolSize: 4})
	clk := newClock(future(10, 12))
	var ms []*postgres.DedupMaintenance
	for range 3 {
		pool, err := postgres.NewPool(ctx, b.DSN(t, dsn), 2)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		ms = append(ms, newMaintainer(t, pool, postgres.DedupOptions{Now: clk.Now}))
	}
	for day := 10; day < 14; day++ {
		clk.Set(future(day, 12))
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created []string
			start   = make(chan struct{})
		)
		for _, m := range ms {
			wg.Go(func() {
				<-start
				res, err := m.Pass(ctx)
				if err != nil {
					t.Errorf("day %d: Pass() through PgBouncer error = %v", day, err)
				}
				mu.Lock()
				created = append(created, res.Created...)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		slices.Sort(created)
		if want := slices.Compact(slices.Clone(created)); !slices.Equal(created, want) {
			t.Errorf("day %d: partitions created = %v, want each once", day, created)
		}
		if n := advisoryLocksHeld(ctx, t, direct); n != 0 {
			t.Errorf("day %d: %d advisory locks still held after the passes, want 0", day, n)
		}
		// One pass alone must do the work, not skip for a stale lock.
		clk.Set(future(day, 13))
		if res := runOnce(ctx, t, ms[day%len(ms)]); res.Skipped {
			t.Errorf("day %d: a lone pass through PgBouncer was skipped", day)
		}
		if t.Failed() {
			return
		}
	}
	if got := partitionNames(ctx, t, direct); len(got) == 0 {
		t.Errorf("no partitions after maintenance through PgBouncer")
	}
}

// TestRelayThroughPgBouncerOnOneServerConnection: the outbox relay makes
// its claimed rows durable and publishes them using one connection at a
// time. Through PgBouncer the server connections are the pooler's to share
// among every pod: a relay that held one for its claim and waited for a
// second would stall once relays held them all, and billing with them.
func TestRelayThroughPgBouncerOnOneServerConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, dsn := pgtest.NewDB(t)
	b := pgbouncertest.Start(t, dsn, pgbouncertest.Options{PoolSize: 1})
	pool, err := postgres.NewPool(ctx, b.DSN(t, dsn), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	if out, err := order.NewBillingService(store, &ledgertest.Gateway{}, group).Bill(ctx, event(t, "ord-1")); err != nil || out != order.OutcomeCharged {
		t.Fatalf("Bill() = %s, %v", out, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []order.InvoiceEvent
	n, err := store.PublishPending(pctx, 10, func(_ context.Context, events []order.InvoiceEvent) error {
		got = append(got, events...)
		return nil
	})
	if err != nil || n != 1 || len(got) != 1 || got[0].OrderID != "ord-1" {
		t.Fatalf("PublishPending() through PgBouncer with one server connection = %d, %v (published %v), want ord-1's event", n, err, got)
	}
}
