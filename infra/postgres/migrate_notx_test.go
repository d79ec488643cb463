package postgres_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgbouncertest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// The marker a migration outside a transaction starts with (migrations/README.md).
const noTxMarker = "-- billing:no-transaction\n"

// concurrentlySet is a migration set as a release that adds an index to a
// live table writes it: a table, the index built concurrently (outside a
// transaction, re-runnable), then an ordinary migration after it. rows
// fills the table; codes repeat when dup is set, so that the unique index
// cannot be built.
func concurrentlySet(rows int, dup bool) fstest.MapFS {
	code := "'c' || g"
	if dup {
		code = "'c' || (g % 2)"
	}
	return fstest.MapFS{
		"0001_item.sql": {Data: []byte(`CREATE TABLE item (id bigint PRIMARY KEY, code text NOT NULL);
INSERT INTO item SELECT g, ` + code + ` FROM generate_series(1, ` + strconv.Itoa(rows) + `) g;`)},
		"0002_item_code_index.sql": {Data: []byte(noTxMarker + `-- Re-runnable: a failed CREATE INDEX CONCURRENTLY leaves an INVALID index.
DROP INDEX CONCURRENTLY IF EXISTS item_code_key;
CREATE UNIQUE INDEX CONCURRENTLY item_code_key ON item (code);
`)},
		"0003_item_note.sql": {Data: []byte(`ALTER TABLE item ADD COLUMN note text;`)},
	}
}

var concurrentlyVersions = []string{"0001_item", "0002_item_code_index", "0003_item_note"}

// indexState reports whether index name exists and whether it is valid
// (a failed CREATE INDEX CONCURRENTLY leaves it INVALID).
func indexState(ctx context.Context, t *testing.T, pool *pgxpool.Pool, name string) (exists, valid bool) {
	t.Helper()
	err := pool.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_and(i.indisvalid), false)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1`, name).Scan(&exists, &valid)
	if err != nil {
		t.Fatalf("read index %s: %v", name, err)
	}
	return exists, valid
}

func advisoryLocks(ctx context.Context, t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateOutsideTransaction: a file marked no-transaction runs its
// statements one by one outside a transaction (CREATE INDEX CONCURRENTLY
// refuses to run inside one, SQLSTATE 25001), its version is recorded once
// it succeeds, and the files around it run as before.
func TestMigrateOutsideTransaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	set := concurrentlySet(1000, false)
	for i := range 2 {
		if err := postgres.MigrateFS(ctx, pool, set); err != nil {
			t.Fatalf("Migrate() run %d error = %v", i+1, err)
		}
	}
	if got := appliedVersions(ctx, t, pool); !slices.Equal(got, concurrentlyVersions) {
		t.Errorf("schema_migrations = %v, want %v", got, concurrentlyVersions)
	}
	if exists, valid := indexState(ctx, t, pool, "item_code_key"); !exists || !valid {
		t.Errorf("index item_code_key exists %v valid %v, want a valid index", exists, valid)
	}
	if pending, err := postgres.PendingFS(ctx, pool, set); err != nil || len(pending) != 0 {
		t.Errorf("Pending() = %v, %v, want none", pending, err)
	}
	if n := advisoryLocks(ctx, t, pool); n != 0 {
		t.Errorf("%d advisory locks held after Migrate, want 0", n)
	}
}

// TestMigrateOutsideTransactionFailsHalfWay: a no-transaction file that
// fails after some of its statements ran leaves them applied and its
// version unrecorded; the next run repeats the whole file, which its
// author wrote to be re-runnable, and finishes.
func TestMigrateOutsideTransactionFailsHalfWay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	set := concurrentlySet(1000, true)
	err := postgres.MigrateFS(ctx, pool, set)
	if err == nil || !strings.Contains(err.Error(), "0002_item_code_index") {
		t.Fatalf("Migrate() over duplicate codes error = %v, want 0002_item_code_index named", err)
	}
	if exists, valid := indexState(ctx, t, pool, "item_code_key"); !exists || valid {
		t.Errorf("after the failed build: index exists %v valid %v, want the INVALID index CONCURRENTLY leaves", exists, valid)
	}
	if pending, err := postgres.PendingFS(ctx, pool, set); err != nil || !slices.Equal(pending, concurrentlyVersions[1:]) {
		t.Errorf("Pending() = %v, %v, want %v", pending, err, concurrentlyVersions[1:])
	}
	if n := advisoryLocks(ctx, t, pool); n != 0 {
		t.Errorf("%d advisory locks held after a failed Migrate, want 0", n)
	}

	if _, err := pool.Exec(ctx, `DELETE FROM item WHERE id > 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE item SET code = 'c' || id`); err != nil {
		t.Fatal(err)
	}
	if err := postgres.MigrateFS(ctx, pool, set); err != nil {
		t.Fatalf("Migrate() after the fix error = %v", err)
	}
	if exists, valid := indexState(ctx, t, pool, "item_code_key"); !exists || !valid {
		t.Errorf("after the rerun: index exists %v valid %v, want a valid index", exists, valid)
	}
	if got := appliedVersions(ctx, t, pool); !slices.Equal(got, concurrentlyVersions) {
		t.Errorf("schema_migrations = %v, want %v", got, concurrentlyVersions)
	}
}

// TestMigrateMarkerMistakes: CONCURRENTLY in a file without the marker
// fails with an error that names the marker; a marker anywhere but the
// first line is refused before anything runs.
func TestMigrateMarkerMistakes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	pool, _ := pgtest.NewEmptyDB(t)
	set := concurrentlySet(10, false)
	set["0002_item_code_index.sql"] = &fstest.MapFile{Data: []byte(`CREATE UNIQUE INDEX CONCURRENTLY item_code_key ON item (code);`)}
	err := postgres.MigrateFS(ctx, pool, set)
	if err == nil || !strings.Contains(err.Error(), "25001") || !strings.Contains(err.Error(), strings.TrimSpace(noTxMarker)) {
		t.Errorf("CONCURRENTLY without the marker: Migrate() error = %v, want SQLSTATE 25001 and the marker named", err)
	}

	pool, _ = pgtest.NewEmptyDB(t)
	set = concurrentlySet(10, false)
	set["0002_item_code_index.sql"] = &fstest.MapFile{Data: []byte("-- add the index\n" + noTxMarker + "CREATE UNIQUE INDEX CONCURRENTLY item_code_key ON item (code);")}
	err = postgres.MigrateFS(ctx, pool, set)
	if err == nil || !strings.Contains(err.Error(), "0002_item_code_index") || !strings.Contains(err.Error(), "first line") {
		t.Errorf("marker on line 2: Migrate() error = %v, want the file named and the first-line rule", err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ('item', 'schema_migrations')`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("marker on line 2: %d of the set's tables created (%v), want none: the set is checked before it runs", tables, err)
	}
}

// TestMigrateOutsideTransactionConcurrent: migrators starting together,
// directly and through PgBouncer in transaction mode, apply each file of a
// set with a CONCURRENTLY file once, and none of them deadlocks with the
// index build of another. Not parallel with the package's other tests:
// its rounds of index builds from several migrators load the shared server,
// and the package has tests with pass timeouts of a second.
func TestMigrateOutsideTransactionConcurrent(t *testing.T) {
	for _, via := range []string{"direct", "pgbouncer"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			for round := range 3 {
				ctx := testCtx(t)
				direct, dsn := pgtest.NewEmptyDB(t)
				if via == "pgbouncer" {
					dsn = pgbouncertest.Start(t, dsn, pgbouncertest.Options{PoolSize: 6}).DSN(t, dsn)
				}
				set := concurrentlySet(20000, false)
				var (
					wg    sync.WaitGroup
					start = make(chan struct{})
					errs  [3]error
				)
				for i := range errs {
					pool, err := postgres.NewPool(ctx, dsn, 2)
					if err != nil {
						t.Fatal(err)
					}
					defer pool.Close()
					wg.Go(func() {
						<-start
						errs[i] = postgres.MigrateFS(ctx, pool, set)
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("round %d: Migrate() %d error = %v", round, i, err)
					}
				}
				if got := appliedVersions(ctx, t, direct); !slices.Equal(got, concurrentlyVersions) {
					t.Errorf("round %d: schema_migrations = %v, want each of %v once", round, got, concurrentlyVersions)
				}
				if exists, valid := indexState(ctx, t, direct, "item_code_key"); !exists || !valid {
					t.Errorf("round %d: index exists %v valid %v, want a valid index", round, exists, valid)
				}
				if n := advisoryLocks(ctx, t, direct); n != 0 {
					t.Errorf("round %d: %d advisory locks held after Migrate, want 0", round, n)
				}
				if t.Failed() {
					return
				}
			}
		})
	}
}

// TestMigrateWaitsWithoutASnapshot: a migrator waiting for the migration
// lock holds no snapshot while it waits. CREATE INDEX CONCURRENTLY, run by
// the lock's holder on another connection, waits for every transaction
// whose snapshot is older than its own: a waiter inside a statement would
// make it wait for ever, the holder waiting for the index and the waiter
// for the holder. Here the test holds the lock (as a migrator running a
// no-transaction file does) and builds an index concurrently while
// Migrate waits; lock_timeout turns such a wait into an error.
func TestMigrateWaitsWithoutASnapshot(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, dsn := pgtest.NewEmptyDB(t)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, postgres.MigrateLockKey); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT 1`); err != nil { // pg_stat_activity shows this query for the holder now
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE side (id int)`); err != nil {
		t.Fatal(err)
	}

	// Migrate gets a pool of its own whose tracer says when it tries the
	// lock a second time: it has then been refused once and is waiting
	// between tries. (pg_stat_activity cannot say so: between two tries the
	// connection's last query is the ROLLBACK.) A Migrate that waited inside
	// pg_advisory_xact_lock instead would never try twice; pg_stat_activity
	// shows it blocked on the lock, and the index build below fails.
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tried := make(chan struct{})
	cfg.ConnConfig.Tracer = &lockTries{after: 2, reached: tried}
	migratorPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer migratorPool.Close()

	migrated := make(chan error, 1)
	go func() { migrated <- postgres.Migrate(ctx, migratorPool) }()
	poll.Until(t, "Migrate waiting for the migration lock", 10*time.Second, func() bool {
		select {
		case <-tried:
			return true
		default:
		}
		var blocked bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%advisory_xact_lock%')`).Scan(&blocked)
		return err == nil && blocked
	})

	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET lock_timeout = '5s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE INDEX CONCURRENTLY side_id ON side (id)`); err != nil {
		t.Errorf("CREATE INDEX CONCURRENTLY while Migrate waits for the lock: %v, want it built", err)
	}
	if _, err := conn.Exec(ctx, `RESET lock_timeout`); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-migrated:
		t.Fatalf("Migrate() returned %v while the lock was held", err)
	default:
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Errorf("Migrate() after the lock was released: %v", err)
	}
}

// lockTries is a pgx tracer that closes reached when the connections it
// traces have started a query on the migration lock after times.
type lockTries struct {
	after   int
	reached chan struct{}
	mu      sync.Mutex
	n       int
}

func (l *lockTries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(data.SQL, "advisory_xact_lock") {
		return ctx
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if l.n == l.after {
		close(l.reached)
	}
	return ctx
}

func (*lockTries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
