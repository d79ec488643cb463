package pgbouncertest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgbouncertest"
	"github.com/acme/billing/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestBillingStartupParametersNeedIgnoring: billing's pool sends
// idle_in_transaction_session_timeout at connect; a PgBouncer that does not
// list it in ignore_startup_parameters refuses every connection.
func TestBillingStartupParametersNeedIgnoring(t *testing.T) {
	ctx := testCtx(t)
	direct, dsn := pgtest.NewDB(t)
	b := pgbouncertest.Start(t, dsn, pgbouncertest.Options{NoIgnoreStartupParameters: true})
	pool, err := postgres.NewPool(ctx, b.DSN(t, dsn), 2)
	if err == nil {
		pool.Close()
		t.Fatal("NewPool() through a PgBouncer without ignore_startup_parameters: no error, want it refused")
	}
	if !strings.Contains(err.Error(), "unsupported startup parameter") {
		t.Errorf("NewPool() error = %v, want PgBouncer's unsupported startup parameter", err)
	}

	// Ignored, the parameter is dropped: the role setting the deploy
	// README prescribes is what applies.
	b2 := pgbouncertest.Start(t, dsn, pgbouncertest.Options{})
	pool, err = postgres.NewPool(ctx, b2.DSN(t, dsn), 2)
	if err != nil {
		t.Fatalf("NewPool() through PgBouncer with ignore_startup_parameters: %v", err)
	}
	defer pool.Close()
	if got := showIdleInTx(ctx, t, pool); got != "0" {
		t.Errorf("idle_in_transaction_session_timeout through PgBouncer without a role setting = %q, want 0 (dropped)", got)
	}
	if _, err := direct.Exec(ctx, "ALTER ROLE CURRENT_USER IN DATABASE "+pgx.Identifier{dbName(ctx, t, direct)}.Sanitize()+
		" SET idle_in_transaction_session_timeout = '60s'"); err != nil {
		t.Fatal(err)
	}
	b3 := pgbouncertest.Start(t, dsn, pgbouncertest.Options{})
	pool3, err := postgres.NewPool(ctx, b3.DSN(t, dsn), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool3.Close()
	if got := showIdleInTx(ctx, t, pool3); got != "1min" {
		t.Errorf("idle_in_transaction_session_timeout through PgBouncer with the role setting = %q, want 1min", got)
	}
}

func showIdleInTx(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func dbName(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var v string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestExecModes: pgx's default mode (named prepared statements, cached per
// client connection) breaks through PgBouncer 1.18 in transaction mode
// once clients share server connections; the exec mode (and
// cache_describe) does not.
func TestExecModes(t *testing.T) {
	_, dsn := pgtest.NewDB(t)
	b := pgbouncertest.Start(t, dsn, pgbouncertest.Options{PoolSize: 2})
	for _, tc := range []struct {
		mode    string
		wantErr bool
	}{
		{"cache_statement", true},
		{pgbouncertest.ExecMode, false},
		{"cache_describe", false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx := testCtx(t)
			cfg, err := pgxpool.ParseConfig(strings.Replace(b.DSN(t, dsn), "default_query_exec_mode="+pgbouncertest.ExecMode,
				"default_query_exec_mode="+tc.mode, 1))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 8
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			err = hammer(ctx, pool, 8, 50)
			if tc.wantErr && err == nil {
				t.Errorf("mode %s through PgBouncer: no error, want prepared statement errors", tc.mode)
			}
			if !tc.wantErr && err != nil {
				t.Errorf("mode %s through PgBouncer: %v", tc.mode, err)
			}
			if err != nil {
				t.Logf("mode %s: %v", tc.mode, err)
			}
		})
	}
}

// hammer runs n rounds of a parameterised query and a two-statement batch
// from workers goroutines; it returns the first error.
func hammer(ctx context.Context, pool *pgxpool.Pool, workers, n int) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				var got int
				err := pool.QueryRow(ctx, "SELECT $1::int + 1", w*n+i).Scan(&got)
				if err == nil {
					err = sameTransaction(ctx, pool)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// sameTransaction sends a pipelined batch as Store.Reserve does and checks
// that its statements ran in one transaction on one server session.
func sameTransaction(ctx context.Context, pool *pgxpool.Pool) error {
	var x1, x2 int64
	var p1, p2 int32
	batch := &pgx.Batch{}
	batch.Queue("SELECT txid_current(), pg_backend_pid() WHERE $1::int = 1", 1).QueryRow(func(r pgx.Row) error { return r.Scan(&x1, &p1) })
	batch.Queue("SELECT txid_current(), pg_backend_pid() WHERE $1::int = 2", 2).QueryRow(func(r pgx.Row) error { return r.Scan(&x2, &p2) })
	if err := pool.SendBatch(ctx, batch).Close(); err != nil {
		return err
	}
	if x1 != x2 || p1 != p2 {
		return &splitError{x1, x2, p1, p2}
	}
	return nil
}

type splitError struct {
	x1, x2 int64
	p1, p2 int32
}

func (e *splitError) Error() string {
	return fmt.Sprintf("batch split: txid %d then %d, backend %d then %d", e.x1, e.x2, e.p1, e.p2)
}

// TestBatchIsOneTransaction: a pipelined batch with one Sync stays one
// implicit transaction on one server connection through PgBouncer, and a
// failing statement in it rolls back the ones before it.
func TestBatchIsOneTransaction(t *testing.T) {
	ctx := testCtx(t)
	direct, dsn := pgtest.NewDB(t)
	if _, err := direct.Exec(ctx, "CREATE TABLE t (n int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	b := pgbouncertest.Start(t, dsn, pgbouncertest.Options{PoolSize: 4})
	pool, err := postgres.NewPool(ctx, b.DSN(t, dsn), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := hammer(ctx, pool, 8, 20); err != nil {
		t.Fatalf("batches through PgBouncer: %v", err)
	}
	batch := &pgx.Batch{}
	batch.Queue("INSERT INTO t VALUES ($1)", 1)
	batch.Queue("INSERT INTO t VALUES ($1)", 1) // unique violation
	if err := pool.SendBatch(ctx, batch).Close(); err == nil {
		t.Fatal("batch with a duplicate key: no error")
	}
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("rows after a failed batch = %d, want 0 (one implicit transaction)", n)
	}
	if got, err := b.ServerConnections(ctx); err != nil || got == 0 {
		t.Errorf("PgBouncer server connections = %d, %v; want some (the work went through it)", got, err)
	}
}
