package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/migrations"
)

// migrateLockKey is the pg_advisory_lock key that serialises migrations
// across processes ("billing" "migrate" as two ASCII words; any constant
// that no other lock of this database uses would do).
const migrateLockKey int64 = 0x62696c6c_6d696772

// unlockTimeout bounds releasing the migration lock after ctx ended.
const unlockTimeout = 5 * time.Second

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
// row. It holds a session-level advisory lock on one dedicated connection
// for the whole run, so processes migrating at once apply each file once:
// the second waits, then finds nothing left to do. Running it again is a
// no-op.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := embedded()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire: %w", translate(ctx, err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return fmt.Errorf("migrate: lock: %w", translate(ctx, err))
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", migrateLockKey); uerr != nil {
			// A session lock must not go back to the pool with the
			// connection: close it, which ends the session and the lock.
			_ = conn.Conn().Close(uctx)
		}
	}()

	if _, err := conn.Exec(ctx, createSchemaMigrations); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", translate(ctx, err))
	}
	rows, _ := conn.Query(ctx, "SELECT version FROM schema_migrations")
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("migrate: read schema_migrations: %w", translate(ctx, err))
	}
	applied := make(map[string]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}

	for _, m := range all {
		if applied[m.version] {
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("migrate %s: begin: %w", m.version, translate(ctx, err))
		}
		// No parameters: the simple protocol, so a file may hold several
		// statements.
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			rollback(ctx, tx)
			return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", m.version); err != nil {
			rollback(ctx, tx)
			return fmt.Errorf("migrate %s: record: %w", m.version, translate(ctx, err))
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("migrate %s: commit: %w", m.version, translate(ctx, err))
		}
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
