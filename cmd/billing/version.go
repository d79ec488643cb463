package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/version"
)

// versionDBTimeout bounds `billing version`'s look at the database.
const versionDBTimeout = 5 * time.Second

// printVersion implements `billing version`: which release this build is,
// the schema it needs, the releases it runs beside and rolls back to
// (docs/interface.md §10), and, when BILLING_DATABASE_URL is set, which schema
// and release the database holds. It reads no other configuration, and
// none without that variable.
func printVersion(ctx context.Context, _ config.Config, _ *slog.Logger, _ []string, stdout, _ io.Writer) error {
	fmt.Fprintln(stdout, version.Get())
	fmt.Fprintf(stdout, "schema: %s (the highest migration it applies)\n", postgres.Schema())
	fmt.Fprintf(stdout, "runs beside: %s (the oldest release it is safe beside in one consumer group and database)\n", version.RunsBeside)
	fmt.Fprintf(stdout, "rolls back to: %s (the oldest release that runs on its schema)\n", version.RollsBackTo)
	dsn := os.Getenv("BILLING_DATABASE_URL")
	if dsn == "" {
		fmt.Fprintln(stdout, "database: BILLING_DATABASE_URL is not set")
		return nil
	}
	fmt.Fprintln(stdout, "database: "+databaseRelease(ctx, dsn))
	return nil
}

// databaseRelease says which schema and release the database at dsn holds,
// and what migrating it or rolling back from it means.
func databaseRelease(ctx context.Context, dsn string) string {
	ctx, cancel := context.WithTimeout(ctx, versionDBTimeout)
	defer cancel()
	applied, err := readApplied(ctx, dsn)
	if err != nil {
		return "not reachable: " + withoutPassword(dsn, oneLine(err.Error()))
	}
	if len(applied) == 0 {
		return fmt.Sprintf("no schema yet (billing migrate applies up to %s)", postgres.Schema())
	}
	schema := applied[len(applied)-1].Version
	held := version.ReleaseOfSchema(schema)
	switch need := postgres.Schema(); {
	case schema > need:
		return fmt.Sprintf("schema %s, of release %s, newer than this build's: it runs there only if %s rolls back to %s (CHANGELOG.md)",
			schema, held, held, version.Release)
	case schema < need:
		before := postgres.SchemaBefore(applied, version.Release)
		prev := version.ReleaseOfSchema(before)
		line := fmt.Sprintf("schema %s, of release %s; billing migrate brings it to %s, after which %s", schema, held, need, version.RollbackNote(prev))
		if version.RollbackRefusal(before) != "" {
			line += " (billing migrate refuses without --allow-no-rollback)"
		}
		return line
	}
	before := postgres.SchemaBefore(applied, version.Release)
	prev := version.ReleaseOfSchema(before)
	if before == "" {
		return fmt.Sprintf("schema %s, of release %s, made by it: %s", schema, held, version.RollbackNote(""))
	}
	return fmt.Sprintf("schema %s, of release %s, migrated from release %s (schema %s): %s", schema, held, prev, before, version.RollbackNote(prev))
}

// readApplied reads the database's schema_migrations on a connection of
// its own.
func readApplied(ctx context.Context, dsn string) ([]postgres.AppliedMigration, error) {
	pool, err := postgres.NewPool(ctx, dsn, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	return postgres.Applied(ctx, pool)
}

// withoutPassword removes dsn's password from msg, should a driver's text
// ever carry it (docs/interface.md §2: secrets never appear in error text).
func withoutPassword(dsn, msg string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil || cfg.Password == "" {
		return msg
	}
	return strings.ReplaceAll(msg, cfg.Password, "xxxxx")
}
