package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/pgtest"
)

// TestAsyncCommitIsLocalToItsPipeline checks what settleGroup relies on:
// sqlAsyncCommit, queued first in a pgx batch, turns synchronous_commit off
// for the statements of that batch's implicit transaction, and for nothing
// the connection runs afterwards (a reserve must still wait for its flush).
func TestAsyncCommitIsLocalToItsPipeline(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	pool, _ := pgtest.NewDB(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The test cluster runs with synchronous_commit off for speed; this
	// session starts from the production default.
	if _, err := conn.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	var inside, after string
	b := &pgx.Batch{}
	b.Queue(postgres.SQLAsyncCommit)
	b.Queue(`SELECT current_setting('synchronous_commit')`).QueryRow(func(row pgx.Row) error { return row.Scan(&inside) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if inside != "off" || after != "on" {
		t.Errorf("synchronous_commit inside the pipeline = %q, after it = %q; want off, then on", inside, after)
	}
}
