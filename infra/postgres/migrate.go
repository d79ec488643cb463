package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/migrations"
)

// migrateLockKey is the pg_advisory_xact_lock key that serialises migrations
// across processes ("billing" "migrate" as two ASCII words; any constant
// that no other lock of this database uses would do).
const migrateLockKey int64 = 0x62696c6c_6d696772

const createSchemaMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// migration is one embedded file; version is its name without ".sql".
type migration struct {
	version string
	sql     string
}

// embedded returns the embedded migrations in name order.
func embedded() ([]migration, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	slices.Sort(names)
	out := make([]migration, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, migration{version: strings.TrimSuffix(path.Base(name), ".sql"), sql: string(b)})
	}
	return out, nil
}

// Migrate applies the embedded migrations that the database lacks, in name
// order, each in its own transaction together with its schema_migrations
// row. Each of those transactions first takes a transaction-scoped advisory
// lock and then checks schema_migrations, so processes migrating at once
// apply each file once: the second waits, then finds the file applied.
// Running it again is a no-op. The lock is transaction-scoped, not held by
// a session across the run, so Migrate is correct through a pooler in
// transaction mode (PgBouncer), which lends a different server session to
// each transaction.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := embedded()
	if err != nil {
		return err
	}
	for _, m := range all {
		if err := applyMigration(ctx, pool, m); err != nil {
			return err
		}
	}
	return nil
}

// applyMigration applies m unless schema_migrations lists it, in one
// transaction under the migration lock.
func applyMigration(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: begin: %w", m.version, translate(ctx, err))
	}
	defer rollback(ctx, tx) // a no-op once committed
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("migrate %s: lock: %w", m.version, translate(ctx, err))
	}
	if _, err := tx.Exec(ctx, createSchemaMigrations); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", translate(ctx, err))
	}
	var applied bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.version).Scan(&applied); err != nil {
		return fmt.Errorf("migrate %s: read schema_migrations: %w", m.version, translate(ctx, err))
	}
	if applied {
		return nil
	}
	// No parameters: the simple protocol, so a file may hold several
	// statements.
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", m.version); err != nil {
		return fmt.Errorf("migrate %s: record: %w", m.version, translate(ctx, err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", m.version, translate(ctx, err))
	}
	return nil
}

// Pending returns the versions of the embedded migrations that the
// database has not applied, in order; `billing run` refuses to start unless
// it is empty.
func Pending(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	all, err := embedded()
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("pending migrations: %w", translate(ctx, err))
	}
	applied := map[string]bool{}
	if exists {
		rows, _ := pool.Query(ctx, "SELECT version FROM schema_migrations")
		versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("pending migrations: %w", translate(ctx, err))
		}
		for _, v := range versions {
			applied[v] = true
		}
	}
	var pending []string
	for _, m := range all {
		if !applied[m.version] {
			pending = append(pending, m.version)
		}
	}
	return pending, nil
}
