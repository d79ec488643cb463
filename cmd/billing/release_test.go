package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/syncbuf"
	"github.com/acme/billing/internal/version"
	"github.com/acme/billing/migrations"
)

// schemaOf applies to pool, as the migrators of earlier releases did (no
// release recorded), the migrations of release r: 1.0.0's, or also
// 1.1.0's (0004 as 1.1.0 shipped it).
func schemaOf(ctx context.Context, t *testing.T, pool *pgxpool.Pool, r string) {
	t.Helper()
	files := []string{"0001_init.sql", "0002_partition_processed_event.sql", "0003_invoice_key_unique_rejected_resume.sql"}
	if r == "1.1.0" {
		files = append(files, "0004_attempt_fence_held.sql", "0005_invoice_outbox.sql")
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		if f == "0004_attempt_fence_held.sql" {
			b, err = os.ReadFile("../../infra/postgres/testdata/released/" + f)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			t.Fatalf("apply %s: %v", f, err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, strings.TrimSuffix(path.Base(f), ".sql")); err != nil {
			t.Fatal(err)
		}
	}
}

// versionOut runs `billing version` with only BILLING_DATABASE_URL set.
func versionOut(t *testing.T, dsn string) string {
	t.Helper()
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", dsn)
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &stdout, &stderr); err != nil {
		t.Fatalf("billing version: %v", err)
	}
	return stdout.String()
}

// TestMigrateRefusesWhatCannotBeRolledBack: a database of 1.0.0 (no attempt
// fence) is refused by `billing migrate` with one line naming the release
// and why, and nothing is applied; --allow-no-rollback migrates it, after
// which the next plain `billing migrate` (every pod's init container)
// passes, and `billing version` says a rollback to 1.0.0 is not safe. A
// database of 1.1.0 migrates without the flag, and a rollback to it is
// safe.
func TestMigrateRefusesWhatCannotBeRolledBack(t *testing.T) {
	ctx := migrateCtx(t)
	c := pgtest.NewCluster(t)
	newDB := func(name string) (*pgxpool.Pool, string) {
		t.Helper()
		admin, err := pgxpool.New(ctx, c.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.New(ctx, c.DSN(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool, c.DSN(name)
	}
	pool, dsn := newDB("from100")
	schemaOf(ctx, t, pool, "1.0.0")
	if out := versionOut(t, dsn); !strings.Contains(out, "of release 1.0.0") || !strings.Contains(out, "refuses without --allow-no-rollback") {
		t.Errorf("billing version on 1.0.0's schema:\n%s\nwant the release and that migrate refuses", out)
	}

	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", dsn)
	var stdout, stderr syncbuf.Buffer
	err := run(ctx, []string{"migrate", "--wait", "0"}, &stdout, &stderr)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "1.0.0") ||
		!strings.Contains(err.Error(), "attempt fence") || !strings.Contains(err.Error(), "--allow-no-rollback") {
		t.Fatalf("billing migrate on 1.0.0's schema: %v, want one line naming 1.0.0, why, and --allow-no-rollback", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != 3 {
		t.Errorf("migrations recorded after the refusal = %d, %v, want 1.0.0's 3 only", n, err)
	}
	if err := run(ctx, []string{"migrate", "--wait", "0", "--allow-no-rollback"}, &stdout, &stderr); err != nil {
		t.Fatalf("billing migrate --allow-no-rollback: %v", err)
	}
	if err := run(ctx, []string{"migrate", "--wait", "0"}, &stdout, &stderr); err != nil {
		t.Errorf("billing migrate on a current schema (the next pod's init container): %v", err)
	}
	if out := versionOut(t, dsn); !strings.Contains(out, "migrated from release 1.0.0") || !strings.Contains(out, "rolling back to 1.0.0 is not safe") {
		t.Errorf("billing version after the forced migration:\n%s\nwant it to say that rolling back to 1.0.0 is not safe", out)
	}

	pool110, dsn110 := newDB("from110")
	schemaOf(ctx, t, pool110, "1.1.0")
	if out := versionOut(t, dsn110); !strings.Contains(out, "of release 1.1.0") || strings.Contains(out, "refuses") {
		t.Errorf("billing version on 1.1.0's schema:\n%s\nwant the release, and no refusal", out)
	}
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", dsn110)
	if err := run(ctx, []string{"migrate", "--wait", "0"}, &stdout, &stderr); err != nil {
		t.Fatalf("billing migrate on 1.1.0's schema: %v", err)
	}
	if out := versionOut(t, dsn110); !strings.Contains(out, "migrated from release 1.1.0") || !strings.Contains(out, "rolling back to 1.1.0 is safe") {
		t.Errorf("billing version after migrating 1.1.0's schema:\n%s\nwant a safe rollback to 1.1.0", out)
	}
}

// TestVersionReadsOnlyTheDatabaseURL: `billing version` prints the release,
// the schema it needs, the releases it runs beside and rolls back to, and
// reads no configuration but BILLING_DATABASE_URL: with every other
// variable bad, and with that one unset, it still answers.
func TestVersionReadsOnlyTheDatabaseURL(t *testing.T) {
	setValidEnv(t)
	t.Setenv("BILLING_MAX_IN_FLIGHT", "-1")
	t.Setenv("BILLING_DATABASE_URL", "")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &stdout, &stderr); err != nil {
		t.Fatalf("billing version with a bad variable set: %v", err)
	}
	out := stdout.String()
	for _, want := range []string{"billing " + version.Release + " ", "schema: 0", "runs beside: " + version.RunsBeside,
		"rolls back to: " + version.RollsBackTo, "database: BILLING_DATABASE_URL is not set"} {
		if !strings.Contains(out, want) {
			t.Errorf("billing version:\n%s\nlacks %q", out, want)
		}
	}
	if out := versionOut(t, "postgres://billing:hunter2@127.0.0.1:9/billing"); !strings.Contains(out, "database: not reachable") || strings.Contains(out, "hunter2") {
		t.Errorf("billing version with an unreachable database:\n%s\nwant it said, without the password", out)
	}
}
