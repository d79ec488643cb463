package postgres_test

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/migrations"
)

// embeddedVersions lists the migration files as Migrate names them.
func embeddedVersions(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("embedded migrations: %v, %v", names, err)
	}
	slices.Sort(names)
	for i, n := range names {
		names[i] = strings.TrimSuffix(n, ".sql")
	}
	return names
}

func appliedVersions(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, _ := pool.Query(ctx, "SELECT version FROM schema_migrations ORDER BY version")
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	return got
}

func checkSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, table := range []string{"processed_event", "invoice"} {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil || !ok {
			t.Errorf("table %s exists = %v, %v, want true", table, ok, err)
		}
	}
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	want := embeddedVersions(t)

	pending, err := postgres.Pending(ctx, pool)
	if err != nil {
		t.Fatalf("Pending() on an empty database error = %v", err)
	}
	if !slices.Equal(pending, want) {
		t.Errorf("Pending() on an empty database = %v, want %v", pending, want)
	}
	for i := range 2 {
		if err := postgres.Migrate(ctx, pool); err != nil {
			t.Fatalf("Migrate() run %d error = %v", i+1, err)
		}
	}
	if got := appliedVersions(ctx, t, pool); !slices.Equal(got, want) {
		t.Errorf("schema_migrations = %v, want %v", got, want)
	}
	pending, err = postgres.Pending(ctx, pool)
	if err != nil || len(pending) != 0 {
		t.Errorf("Pending() after Migrate = %v, %v, want none", pending, err)
	}
	checkSchema(ctx, t, pool)

	// The session lock went with Migrate, not back into the pool.
	var locks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&locks); err != nil || locks != 0 {
		t.Errorf("advisory locks held after Migrate = %d, %v, want 0", locks, err)
	}
}

func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	want := embeddedVersions(t)
	const rounds = 4
	for round := range rounds {
		ctx := testCtx(t)
		poolA, dsn := pgtest.NewEmptyDB(t)
		poolB, err := postgres.NewPool(ctx, dsn, 2)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  [2]error
		)
		for i, p := range []*pgxpool.Pool{poolA, poolB} {
			wg.Go(func() {
				<-start
				errs[i] = postgres.Migrate(ctx, p)
			})
		}
		close(start)
		wg.Wait()
		poolB.Close()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: Migrate() from pool %d error = %v", round, i, err)
			}
		}
		if got := appliedVersions(ctx, t, poolA); !slices.Equal(got, want) {
			t.Errorf("round %d: schema_migrations = %v, want each of %v once", round, got, want)
		}
		checkSchema(ctx, t, poolA)
	}
}

func TestMigratedTemplateIsCurrent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	pending, err := postgres.Pending(ctx, pool)
	if err != nil || len(pending) != 0 {
		t.Errorf("Pending() on pgtest.NewDB = %v, %v, want none", pending, err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Errorf("Migrate() on a current database error = %v", err)
	}
}
