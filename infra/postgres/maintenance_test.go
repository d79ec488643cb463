package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

const week = 7 * 24 * time.Hour

// clock is a controllable time source for DedupOptions.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// future is a day far from the migration's partitions (made around the
// real today), so a test's partitions are all its maintainer's.
func future(day int, hour int) time.Time { return time.Date(2031, 3, day, hour, 0, 0, 0, time.UTC) }

func newMaintainer(t *testing.T, pool *pgxpool.Pool, opts postgres.DedupOptions) *postgres.DedupMaintenance {
	t.Helper()
	if opts.Retention == 0 {
		opts.Retention = week
	}
	m, err := postgres.NewDedupMaintenance(pool, opts)
	if err != nil {
		t.Fatalf("NewDedupMaintenance() error = %v", err)
	}
	return m
}

func runOnce(ctx context.Context, t *testing.T, m *postgres.DedupMaintenance) postgres.DedupResult {
	t.Helper()
	res, err := m.Pass(ctx)
	if err != nil {
		t.Fatalf("Pass() error = %v (result %+v)", err, res)
	}
	return res
}

func days(from time.Time, n int) []string {
	var out []string
	for i := range n {
		out = append(out, dayName(from.AddDate(0, 0, i)))
	}
	return out
}

// waitForLockWait polls until some session waits for a lock on relation.
func waitForLockWait(ctx context.Context, t *testing.T, pool *pgxpool.Pool, relation string, waiters int) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("%d sessions waiting for a lock on %s", waiters, relation), 30*time.Second, func() bool {
		var n int
		// Only this test's database: the others are clones of one
		// template, so their tables have the same OIDs, and a parallel
		// test's waiters would count here.
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = $1
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, relation).Scan(&n); err != nil {
			t.Fatalf("read pg_locks: %v", err)
		}
		return n >= waiters
	})
}

func TestNewDedupMaintenanceRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []postgres.DedupOptions{
		{},
		{Retention: -time.Hour},
		{Retention: time.Hour, Ahead: -1},
		{Retention: time.Hour, BatchSize: -1},
	} {
		if _, err := postgres.NewDedupMaintenance(nil, opts); err == nil {
			t.Errorf("NewDedupMaintenance(%+v) error = nil, want one", opts)
		}
	}
}

func TestMaintainerCreatesPartitionsAhead(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	met := metrics.New(prometheus.NewRegistry(), false)
	clk := newClock(future(10, 12))
	m := newMaintainer(t, pool, postgres.DedupOptions{Now: clk.Now, Metrics: met.Maintenance()})
	migrated := slices.DeleteFunc(partitionNames(ctx, t, pool), func(n string) bool { return n == "processed_event_default" })

	res := runOnce(ctx, t, m)
	want := days(future(9, 0), 5) // yesterday, today and 3 ahead
	if !slices.Equal(res.Created, want) {
		t.Errorf("Created = %v, want %v", res.Created, want)
	}
	bounds := partitionBounds(ctx, t, pool)
	for i, name := range want {
		if got, wantB := bounds[name], dayBound(future(9+i, 0)); got != wantB {
			t.Errorf("%s bound = %q, want %q", name, got, wantB)
		}
	}
	// The migration's days (around the real today) are years past the
	// retention by this clock: dropped, empty.
	if !slices.Equal(res.Dropped, migrated) || res.RowsDropped != 0 {
		t.Errorf("Dropped = %v with %d rows, want the migration's %v with 0", res.Dropped, res.RowsDropped, migrated)
	}
	if res.Partitions != len(want) {
		t.Errorf("Partitions = %d, want %d", res.Partitions, len(want))
	}
	if got := testutil.ToFloat64(met.DedupPartitions); got != float64(res.Partitions) {
		t.Errorf("billing_dedup_partitions = %v, want %d", got, res.Partitions)
	}
	if got := testutil.ToFloat64(met.MaintenanceRuns.WithLabelValues("ok")); got != 1 {
		t.Errorf("maintenance runs ok = %v, want 1", got)
	}
	if got, want := testutil.ToFloat64(met.MaintenanceLast), float64(future(10, 12).Unix()); got != want {
		t.Errorf("last success = %v, want %v", got, want)
	}

	// Events of the coming days go to their partitions.
	id := idAt(t, future(13, 23))
	if !tryInsert(ctx, t, pool, id, group) {
		t.Fatalf("tryInsert(%s) = false, want true", id)
	}
	if got := partitionOf(ctx, t, pool, id, group); got != "processed_event_p20310313" {
		t.Errorf("event of 2031-03-13 in %q, want processed_event_p20310313", got)
	}

	// Nothing to do again the same day; the next day adds one.
	if res := runOnce(ctx, t, m); len(res.Created)+len(res.Dropped) != 0 {
		t.Errorf("second pass = %+v, want nothing created or dropped", res)
	}
	clk.Set(future(11, 0))
	if res := runOnce(ctx, t, m); !slices.Equal(res.Created, []string{"processed_event_p20310314"}) {
		t.Errorf("next day's pass created %v, want [processed_event_p20310314]", res.Created)
	}
}

// TestMaintainerDropsExpiredKeepsInside: with a 7-day retention, a day
// partition goes when its last instant is 7 days old, and not a
// millisecond earlier; the partition holding the cutoff stays.
func TestMaintainerDropsExpiredKeepsInside(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	met := metrics.New(prometheus.NewRegistry(), false)
	clk := newClock(future(10, 12))
	m := newMaintainer(t, pool, postgres.DedupOptions{Retention: week, Now: clk.Now, Metrics: met.Maintenance()})
	runOnce(ctx, t, m) // 03-09 … 03-13

	old := []uuid.UUID{idAt(t, future(9, 1)), idAt(t, future(9, 23))}
	kept := []uuid.UUID{idAt(t, future(10, 0)), idAt(t, future(10, 5)), idAt(t, future(10, 23))}
	for _, id := range append(slices.Clone(old), kept...) {
		if !tryInsert(ctx, t, pool, id, group) {
			t.Fatalf("tryInsert(%s) = false, want true", id)
		}
	}

	// 03-09's partition ends at 03-10 00:00: expired from 03-17 00:00 on.
	clk.Set(future(17, 0).Add(-time.Millisecond))
	if res := runOnce(ctx, t, m); len(res.Dropped) != 0 {
		t.Errorf("a millisecond before expiry: Dropped = %v, want none", res.Dropped)
	}
	if got := testutil.ToFloat64(met.DedupRowsDeleted); got != 0 {
		t.Errorf("rows deleted = %v, want 0", got)
	}

	clk.Set(future(17, 0))
	res := runOnce(ctx, t, m)
	if !slices.Equal(res.Dropped, []string{"processed_event_p20310309"}) || res.RowsDropped != int64(len(old)) {
		t.Errorf("at expiry: Dropped = %v with %d rows, want [processed_event_p20310309] with %d", res.Dropped, res.RowsDropped, len(old))
	}
	if got := testutil.ToFloat64(met.DedupRowsDeleted); got != float64(len(old)) {
		t.Errorf("billing_dedup_rows_deleted_total = %v, want %d", got, len(old))
	}
	names := partitionNames(ctx, t, pool)
	if slices.Contains(names, "processed_event_p20310309") || !slices.Contains(names, "processed_event_p20310310") {
		t.Errorf("partitions = %v, want 20310309 gone and 20310310 (holding the cutoff) kept", names)
	}
	for _, id := range old {
		if got := partitionOf(ctx, t, pool, id, group); got != "" {
			t.Errorf("expired %s still in %s", id, got)
		}
	}
	for _, id := range kept {
		if tryInsert(ctx, t, pool, id, group) {
			t.Errorf("tryInsert(%s) inside the retention = true, want false (still a duplicate)", id)
		}
	}
	if got := testutil.ToFloat64(met.DedupPartitions); got != float64(res.Partitions) || !slices.Contains(res.Created, "processed_event_p20310320") {
		t.Errorf("billing_dedup_partitions = %v, Partitions %d, Created %v", got, res.Partitions, res.Created)
	}
}

// TestMaintainerKeepsRecentlyProcessed: an old event processed recently
// (a late replay) keeps its partition until the row itself is older than
// the retention.
func TestMaintainerKeepsRecentlyProcessed(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	now := time.Now().UTC()
	clk := newClock(now.AddDate(0, 0, -10))
	m := newMaintainer(t, pool, postgres.DedupOptions{Retention: week, Now: clk.Now})
	runOnce(ctx, t, m) // creates the day of now-10d
	id := idAt(t, now.AddDate(0, 0, -10))
	if !tryInsert(ctx, t, pool, id, group) { // processed_at: now
		t.Fatalf("tryInsert(%s) = false, want true", id)
	}
	name := partitionOf(ctx, t, pool, id, group)
	if name != dayName(utcDay(now.AddDate(0, 0, -10))) {
		t.Fatalf("event of ten days ago in %q, want %s", name, dayName(utcDay(now.AddDate(0, 0, -10))))
	}

	clk.Set(now)
	res := runOnce(ctx, t, m)
	if slices.Contains(res.Dropped, name) || !slices.Contains(res.Kept, name) {
		t.Errorf("Dropped = %v, Kept = %v, want %s kept: its row was processed within the retention", res.Dropped, res.Kept, name)
	}
	if tryInsert(ctx, t, pool, id, group) {
		t.Errorf("tryInsert(%s) = true, want false", id)
	}

	clk.Set(now.Add(week + time.Hour))
	res = runOnce(ctx, t, m)
	if !slices.Contains(res.Dropped, name) {
		t.Errorf("a retention after processing: Dropped = %v, want %s", res.Dropped, name)
	}
}

func utcDay(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

// TestMaintainerExpiresDefaultInBatches: rows outside every day partition
// expire by processed_at, in batches.
func TestMaintainerExpiresDefaultInBatches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	met := metrics.New(prometheus.NewRegistry(), false)
	now := time.Now().UTC()
	m := newMaintainer(t, pool, postgres.DedupOptions{Retention: week, BatchSize: 3, Now: func() time.Time { return now }, Metrics: met.Maintenance()})

	const expired = 10
	var fresh []uuid.UUID
	for i := range expired {
		// Made months ago (clock skew or replay), processed 8 to 17 days ago.
		insertAt(ctx, t, pool, idAt(t, now.AddDate(0, -3, i)), group, now.Add(-week-time.Duration(i+1)*24*time.Hour))
	}
	for i := range 4 {
		id := idAt(t, now.AddDate(0, -3, i))
		fresh = append(fresh, id)
		insertAt(ctx, t, pool, id, "another-group", now.Add(-week+time.Duration(i+1)*time.Minute))
	}
	v4 := uuid.Must(uuid.NewV4())
	insertAt(ctx, t, pool, v4, group, now.Add(-2*week))

	res := runOnce(ctx, t, m)
	if res.RowsDeleted != expired+1 {
		t.Errorf("RowsDeleted = %d, want %d", res.RowsDeleted, expired+1)
	}
	if got := testutil.ToFloat64(met.DedupRowsDeleted); got != expired+1 {
		t.Errorf("billing_dedup_rows_deleted_total = %v, want %d", got, expired+1)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event_default`).Scan(&left); err != nil || left != len(fresh) {
		t.Errorf("rows left in DEFAULT = %d, %v, want %d", left, err, len(fresh))
	}
	for _, id := range fresh {
		if tryInsert(ctx, t, pool, id, "another-group") {
			t.Errorf("tryInsert(%s) within the retention = true, want false", id)
		}
	}
	if res := runOnce(ctx, t, m); res.RowsDeleted != 0 {
		t.Errorf("second pass RowsDeleted = %d, want 0", res.RowsDeleted)
	}
}

// TestMaintainerMovesRowsOutOfDefault: a day that got events before its
// partition existed (the maintainer down for days, a clock far ahead) gets
// its partition with those rows moved in, still deduplicating.
func TestMaintainerMovesRowsOutOfDefault(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	ids := []uuid.UUID{idAt(t, future(11, 1)), idAt(t, future(11, 2)), idAt(t, future(12, 3))}
	for _, id := range ids {
		if !tryInsert(ctx, t, pool, id, group) {
			t.Fatalf("tryInsert(%s) = false, want true", id)
		}
		if got := partitionOf(ctx, t, pool, id, group); got != "processed_event_default" {
			t.Fatalf("%s before its partition exists in %q, want processed_event_default", id, got)
		}
	}
	m := newMaintainer(t, pool, postgres.DedupOptions{Now: newClock(future(10, 12)).Now})
	res := runOnce(ctx, t, m)
	if res.Moved != int64(len(ids)) || len(res.Created) != 5 {
		t.Errorf("Moved = %d, Created = %v, want %d rows moved into 5 new partitions", res.Moved, res.Created, len(ids))
	}
	for i, want := range []string{"processed_event_p20310311", "processed_event_p20310311", "processed_event_p20310312"} {
		if got := partitionOf(ctx, t, pool, ids[i], group); got != want {
			t.Errorf("%s in %q, want %s", ids[i], got, want)
		}
		if tryInsert(ctx, t, pool, ids[i], group) {
			t.Errorf("tryInsert(%s) after the move = true, want false", ids[i])
		}
	}
}

// TestReserveDuringAttachRetries: a reserve whose dedup insert waited to
// write into DEFAULT while its day's partition was being attached fails
// there (23514); Reserve runs it again in place, where the row goes to the
// new partition and deduplicates correctly.
func TestReserveDuringAttachRetries(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	clk := newClock(future(10, 12))
	runOnce(ctx, t, newMaintainer(t, pool, postgres.DedupOptions{Ahead: 1, Now: clk.Now})) // up to 03-11

	inDefault := idAt(t, future(12, 1))
	if !tryInsert(ctx, t, pool, inDefault, group) {
		t.Fatal("first tryInsert = false")
	}
	newID := idAt(t, future(12, 2))

	// Hold ATTACH back: it needs SHARE UPDATE EXCLUSIVE on processed_event.
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rollbackTx(ctx, blocker)
	if _, err := blocker.Exec(ctx, "LOCK TABLE ONLY processed_event IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	m := newMaintainer(t, pool, postgres.DedupOptions{Ahead: 2, LockTimeout: 20 * time.Second, Now: clk.Now})
	var (
		wg     sync.WaitGroup
		res    postgres.DedupResult
		runErr error
		insErr [2]error
		first  [2]bool
	)
	wg.Go(func() { res, runErr = m.Pass(ctx) })
	waitForLockWait(ctx, t, pool, "processed_event", 1) // moved the row, waits to attach
	for i, id := range []uuid.UUID{inDefault, newID} {
		wg.Go(func() {
			var r order.Reservation
			r, insErr[i] = postgres.NewStore(pool).Reserve(ctx, pendingInvoice("ord-"+id.String(), id), group, terms)
			first[i] = r.FirstSeen
		})
	}
	waitForLockWait(ctx, t, pool, "processed_event_default", 2)
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if runErr != nil || !slices.Equal(res.Created, []string{"processed_event_p20310312"}) || res.Moved != 1 {
		t.Fatalf("Pass() = %+v, %v, want processed_event_p20310312 created with 1 row moved", res, runErr)
	}
	for i, err := range insErr {
		if err != nil {
			t.Errorf("reserve %d during the attach error = %v, want nil after an in-place retry", i, err)
		}
	}
	if first[0] {
		t.Errorf("Reserve(%s) during the attach first seen, want not: its row was moved, not lost", inDefault)
	}
	if !first[1] {
		t.Errorf("Reserve(%s) during the attach not first seen, want first seen", newID)
	}
	for _, id := range []uuid.UUID{inDefault, newID} {
		if got := partitionOf(ctx, t, pool, id, group); got != "processed_event_p20310312" {
			t.Errorf("%s in %q, want processed_event_p20310312", id, got)
		}
	}
}

func rollbackTx(ctx context.Context, tx pgx.Tx) { _ = tx.Rollback(context.WithoutCancel(ctx)) }

// TestMaintainerSkipsWhileLocked: another process holding the maintenance
// lock makes a pass skip, doing nothing.
func TestMaintainerSkipsWhileLocked(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	met := metrics.New(prometheus.NewRegistry(), false)
	m := newMaintainer(t, pool, postgres.DedupOptions{Now: newClock(future(10, 12)).Now, Metrics: met.Maintenance()})
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", postgres.DedupLockKey); err != nil {
		t.Fatal(err)
	}
	before := partitionNames(ctx, t, pool)
	met.DedupPartitions.Set(99)
	res := runOnce(ctx, t, m)
	if !res.Skipped || len(res.Created) != 0 {
		t.Errorf("Pass() while locked = %+v, want skipped", res)
	}
	// A skipped pass reads no catalog (it could queue behind the working
	// pod's table locks): its gauge stays as it was.
	if got := testutil.ToFloat64(met.DedupPartitions); got != 99 {
		t.Errorf("partitions gauge %v after a skipped pass, want it untouched", got)
	}
	// Another process does the work: this pass completed its part.
	if got := testutil.ToFloat64(met.BackgroundLastSuccess.WithLabelValues(metrics.ServiceMaintainer)); got == 0 {
		t.Error("billing_background_last_success_timestamp_seconds{service=maintainer} = 0 after a skipped pass, want its time")
	}
	if after := partitionNames(ctx, t, pool); !slices.Equal(after, before) {
		t.Errorf("partitions changed while skipped: %v, want %v", after, before)
	}
	if got := testutil.ToFloat64(met.MaintenanceRuns.WithLabelValues("skipped")); got != 1 {
		t.Errorf("maintenance runs skipped = %v, want 1", got)
	}
	if got := testutil.ToFloat64(met.MaintenanceLast); got != 0 {
		t.Errorf("last success = %v, want 0", got)
	}
	if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock($1)", postgres.DedupLockKey); err != nil {
		t.Fatal(err)
	}
	other.Release()
	if res := runOnce(ctx, t, m); res.Skipped || len(res.Created) != 5 {
		t.Errorf("Pass() after unlock = %+v, want 5 partitions created", res)
	}
}

// TestMaintainersAtOnce: two maintainers (two processes) run at once; the
// one that gets the lock works, the other skips and carries on.
func TestMaintainersAtOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, dsn := pgtest.NewDB(t)
	poolB, err := postgres.NewPool(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer poolB.Close()
	clk := newClock(future(10, 12))
	a := newMaintainer(t, pool, postgres.DedupOptions{LockTimeout: 20 * time.Second, Now: clk.Now})
	b := newMaintainer(t, poolB, postgres.DedupOptions{Now: clk.Now})

	// Hold A mid-pass: it must lock DEFAULT to create a partition, and an
	// open transaction is writing there.
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rollbackTx(ctx, writer)
	if _, err := writer.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, 'w')`,
		pgtype.UUID{Bytes: uuid.Must(uuid.NewV4()), Valid: true}); err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		resA postgres.DedupResult
		errA error
	)
	wg.Go(func() { resA, errA = a.Pass(ctx) })
	waitForLockWait(ctx, t, pool, "processed_event_default", 1)

	resB := runOnce(ctx, t, b)
	if !resB.Skipped {
		t.Errorf("B while A works = %+v, want skipped", resB)
	}
	rollbackTx(ctx, writer)
	wg.Wait()
	if errA != nil || resA.Skipped || !slices.Equal(resA.Created, days(future(9, 0), 5)) {
		t.Errorf("A = %+v, %v, want 5 partitions created", resA, errA)
	}

	// Many at once, a day later: each new partition is created exactly once.
	clk.Set(future(11, 12))
	ms := []*postgres.DedupMaintenance{a, b,
		newMaintainer(t, pool, postgres.DedupOptions{Now: clk.Now}), newMaintainer(t, poolB, postgres.DedupOptions{Now: clk.Now})}
	var (
		mu      sync.Mutex
		created []string
		start   = make(chan struct{})
	)
	for _, m := range ms {
		wg.Go(func() {
			<-start
			res, err := m.Pass(ctx)
			if err != nil {
				t.Errorf("Pass() error = %v", err)
			}
			mu.Lock()
			created = append(created, res.Created...)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if !slices.Equal(created, []string{"processed_event_p20310314"}) {
		t.Errorf("created by 4 maintainers at once = %v, want [processed_event_p20310314] once", created)
	}
}

// TestMaintainerPassTimeout: a pass stuck behind a lock ends at
// PassTimeout as an error, and gives the maintenance lock back.
func TestMaintainerPassTimeout(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	met := metrics.New(prometheus.NewRegistry(), false)
	m := newMaintainer(t, pool, postgres.DedupOptions{PassTimeout: 300 * time.Millisecond, LockTimeout: 20 * time.Second,
		Now: newClock(future(10, 12)).Now, Metrics: met.Maintenance()})
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rollbackTx(ctx, writer)
	// A lock every step of the pass waits behind: the table and all its
	// partitions (LOCK recurses). An uncommitted insert was a blocker whose
	// reach depended on which partition its random id went to.
	if _, err := writer.Exec(ctx, `LOCK TABLE processed_event IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	res, err := m.Pass(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || len(res.Created) != 0 {
		t.Errorf("Pass() behind a lock = %+v, %v, want nothing created and context.DeadlineExceeded", res, err)
	}
	if got := testutil.ToFloat64(met.MaintenanceRuns.WithLabelValues("error")); got != 1 {
		t.Errorf("maintenance runs error = %v, want 1", got)
	}
	rollbackTx(ctx, writer)
	// The next pass, with time enough for five partitions on a loaded
	// machine (the 300 ms above is for giving up, not for working), finds
	// the maintenance lock free.
	next := newMaintainer(t, pool, postgres.DedupOptions{PassTimeout: 30 * time.Second, Now: newClock(future(10, 12)).Now})
	if res := runOnce(ctx, t, next); res.Skipped || len(res.Created) != 5 {
		t.Errorf("next Pass() = %+v, want the lock free and 5 partitions created", res)
	}
}

// TestBillingReplayAfterDedupExpiry: once the dedup row has expired, a
// replay of the event is caught by the invoice guard and counted as
// duplicate_order, with no second charge.
func TestBillingReplayAfterDedupExpiry(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	gw := &ledgertest.Gateway{}
	svc := order.NewBillingService(store, gw, group)
	evt := event(t, "ord-1")

	got, err := svc.Bill(ctx, evt)
	if err != nil || got != order.OutcomeCharged {
		t.Fatalf("Bill() = %s, %v, want charged", got, err)
	}
	m := newMaintainer(t, pool, postgres.DedupOptions{Retention: week, Now: func() time.Time { return time.Now().Add(30 * 24 * time.Hour) }})
	res := runOnce(ctx, t, m)
	if res.RowsDropped+res.RowsDeleted != 1 {
		t.Fatalf("maintenance a month later = %+v, want the one dedup row expired", res)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 0 {
		t.Fatalf("ProcessedCount() = %d, %v, want 0", n, err)
	}

	got, err = svc.Bill(ctx, evt)
	if err != nil || got != order.OutcomeDuplicateOrder {
		t.Errorf("replay after expiry Bill() = %s, %v, want duplicate_order", got, err)
	}
	if keys := gw.Keys(); len(keys) != 1 {
		t.Errorf("gateway calls = %v, want one", keys)
	}
}
