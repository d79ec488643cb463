package postgres_test

import (
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/migrations"
)

// released0004 is migration 0004 as release 1.1.0 shipped it (one
// transaction, a validated CHECK, a plain index), which the databases that
// 1.1.0 migrated have applied.
func released0004(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/released/0004_attempt_fence_held.sql")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMigration0004BothPathsOneSchema: a database that applied 0004 as
// 1.1.0 shipped it and one that applies today's form (statements of their
// own under the lock discipline) have the same schema, right after 0004 and
// at the end; the first never runs today's 0004.
func TestMigration0004BothPathsOneSchema(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	old, _ := pgtest.NewEmptyDB(t)
	cur, _ := pgtest.NewEmptyDB(t)
	const v = "0004_attempt_fence_held"
	oldSet := migrationSet(t, v, map[string][]byte{v + ".sql": released0004(t)})
	if err := postgres.MigrateFS(ctx, old, oldSet); err != nil {
		t.Fatalf("migrate with 1.1.0's 0004: %v", err)
	}
	if err := postgres.MigrateFS(ctx, cur, migrationSet(t, v, nil)); err != nil {
		t.Fatalf("migrate with today's 0004: %v", err)
	}
	if got, want := catalog(ctx, t, cur), catalog(ctx, t, old); got != want {
		t.Errorf("after 0004, today's form differs from 1.1.0's:\n%s", lineDiff(got, want))
	}

	// The database 1.1.0 migrated goes on with today's set: 0004 stays as
	// it ran.
	pending, err := postgres.Pending(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pending {
		if p == v {
			t.Errorf("Pending() on a database that applied 1.1.0's 0004 = %v, want 0004 not among them", pending)
		}
	}
	for _, pool := range []*pgxpool.Pool{old, cur} {
		if err := postgres.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate to the end: %v", err)
		}
	}
	if got, want := catalog(ctx, t, cur), catalog(ctx, t, old); got != want {
		t.Errorf("at the end, the two paths differ:\n%s", lineDiff(got, want))
	}
}

// TestMigration0004RunsAgainAfterAnyPrefix: today's 0004 runs outside a
// transaction, so a failure or a lock timeout half-way leaves the
// statements before it applied, and the next run repeats the whole file.
// After every prefix of it (an INVALID index included, as a failed
// concurrent build leaves it), a full run reaches the same schema as a run
// from the start.
func TestMigration0004RunsAgainAfterAnyPrefix(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const v = "0004_attempt_fence_held"
	text, err := fs.ReadFile(migrations.FS, v+".sql")
	if err != nil {
		t.Fatal(err)
	}
	stmts, err := postgres.SplitStatements(string(text))
	if err != nil {
		t.Fatal(err)
	}
	want := func() string {
		pool, _ := pgtest.NewEmptyDB(t)
		if err := postgres.MigrateFS(ctx, pool, migrationSet(t, v, nil)); err != nil {
			t.Fatal(err)
		}
		return catalog(ctx, t, pool)
	}()
	for k := 1; k <= len(stmts); k++ {
		pool, _ := pgtest.NewEmptyDB(t)
		if err := postgres.MigrateFS(ctx, pool, migrationSet(t, schema100, nil)); err != nil {
			t.Fatal(err)
		}
		for _, s := range stmts[:k] {
			if _, err := pool.Exec(ctx, s); err != nil {
				t.Fatalf("statement %q: %v", s, err)
			}
		}
		if strings.Contains(stmts[k-1], "CREATE INDEX CONCURRENTLY") {
			// What a build that failed half-way leaves behind.
			if _, err := pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'invoice_held_idx'::regclass`); err != nil {
				t.Fatal(err)
			}
		}
		if err := postgres.MigrateFS(ctx, pool, migrationSet(t, v, nil)); err != nil {
			t.Fatalf("after the first %d statements, Migrate() error = %v", k, err)
		}
		if got := catalog(ctx, t, pool); got != want {
			t.Errorf("after the first %d statements and a full run, the schema differs:\n%s", k, lineDiff(got, want))
		}
	}
}
