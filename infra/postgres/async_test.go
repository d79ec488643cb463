package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestPreludesAreLocalToTheirPipeline checks what the grouped statements
// rely on: a prelude queued first in a pgx batch sets the planner's settings
// (and, for a settle, synchronous_commit) for the statements of that batch's
// implicit transaction, and for nothing the connection runs afterwards (a
// reserve must still wait for its flush; the completer's and maintenance's
// statements keep the server's planning).
func TestPreludesAreLocalToTheirPipeline(t *testing.T) {
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
	const settings = `SELECT concat_ws(' ', current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
		current_setting('enable_hashjoin'), current_setting('enable_mergejoin'), current_setting('synchronous_commit'))`
	for _, tc := range []struct {
		name, prelude, inside string
	}{
		{"reserve", postgres.SQLReservePrelude, "force_generic_plan off off off on"},
		{"settle", postgres.SQLSettlePrelude, "force_generic_plan off off off off"},
	} {
		var inside, after string
		b := &pgx.Batch{}
		b.Queue(tc.prelude)
		b.Queue(settings).QueryRow(func(row pgx.Row) error { return row.Scan(&inside) })
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			t.Fatalf("%s batch: %v", tc.name, err)
		}
		if err := conn.QueryRow(ctx, settings).Scan(&after); err != nil {
			t.Fatal(err)
		}
		const want = "auto on on on on"
		if inside != tc.inside || after != want {
			t.Errorf("%s: planner settings and synchronous_commit inside the pipeline %q, after it %q; want %q, then %q", tc.name, inside, after, tc.inside, want)
		}
	}
}
