package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// pod110 runs the statements of release 1.1.0 (e6198e4,
// release110_test.go) with the parameters its store gives them, publishing
// on.
type pod110 struct{ pool *pgxpool.Pool }

const traceparent110 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// reserve is 1.1.0's reserve of one event, taking attempt for it; it
// reports whether it reopened.
func (p pod110) reserve(ctx context.Context, t *testing.T, orderID string, key uuid.UUID, attempt int64) (reopened bool) {
	t.Helper()
	var firstSeen, held bool
	if err := p.pool.QueryRow(ctx, v110SQLReserveOne, orderID, key, "cus", int64(12990), "EUR", attempt, group,
		terms.Life.Seconds(), terms.HoldAfter.Seconds(), order.ReasonKeyAged, true).Scan(&firstSeen, &reopened, &held); err != nil {
		t.Fatalf("1.1.0 reserve: %v", err)
	}
	return reopened
}

// settle is 1.1.0's settle of one invoice under attempt.
func (p pod110) settle(ctx context.Context, t *testing.T, orderID string, key uuid.UUID, attempt int64, status order.InvoiceStatus) bool {
	t.Helper()
	var n int
	b := &pgx.Batch{}
	b.Queue(v110SQLSettlePrelude)
	b.Queue(v110SQLSettleOne, orderID, key, attempt, string(status), "ch_110", "refused", traceparent110, true).
		QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	if err := p.pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("1.1.0 settle: %v", err)
	}
	return n == 1
}

// TestRelease110OnThisSchema: after a rollback, 1.1.0 runs on this
// release's schema as it did on its own: each of its statements parses and
// does what it did (attempts, key_sent_at, reopens), it publishes each of
// its transitions itself, once, with the traceparent it gives (the
// triggers of migration 0006 leave a fence-aware writer alone), and its
// completer's claim is not taken for one of 1.0.0's.
func TestRelease110OnThisSchema(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	old := pod110{pool: pool}

	// Charged at once.
	k := newEventID(t)
	old.reserve(ctx, t, "ord-a", k, 11)
	if id, alive := attemptOf(ctx, t, pool, "ord-a"); id != 11 || !alive {
		t.Errorf("1.1.0's attempt = %d (alive %v), want 11 alive", id, alive)
	}
	if !old.settle(ctx, t, "ord-a", k, 11, order.StatusCharged) {
		t.Fatal("1.1.0's settle moved nothing")
	}
	wantEvents(ctx, t, pool, "ord-a", transition{k, order.StatusCharged, 0})
	var tp string
	if err := pool.QueryRow(ctx, `SELECT coalesce(traceparent, '') FROM invoice_outbox WHERE order_id = 'ord-a'`).Scan(&tp); err != nil || tp != traceparent110 {
		t.Errorf("1.1.0's event carries traceparent %q, %v, want its own %q (its row, not a trigger's)", tp, err, traceparent110)
	}

	// Rejected, then reopened under a new key and charged.
	k1, k2 := newEventID(t), newEventID(t)
	old.reserve(ctx, t, "ord-b", k1, 21)
	if !old.settle(ctx, t, "ord-b", k1, 21, order.StatusRejected) {
		t.Fatal("1.1.0's rejection moved nothing")
	}
	if !old.reserve(ctx, t, "ord-b", k2, 22) {
		t.Fatal("1.1.0's next event did not reopen the rejected invoice")
	}
	if !old.settle(ctx, t, "ord-b", k2, 22, order.StatusCharged) {
		t.Fatal("1.1.0's settle after the reopen moved nothing")
	}
	wantEvents(ctx, t, pool, "ord-b", transition{k1, order.StatusRejected, 0}, transition{k2, order.StatusCharged, 1})

	// Left pending (its request answered 503 and the attempt given back),
	// then claimed by its completer, which takes the attempt next.
	k3 := newEventID(t)
	old.reserve(ctx, t, "ord-c", k3, 31)
	if _, err := pool.Exec(ctx, v110SQLReleaseAttempt, "ord-c", k3, int64(31)); err != nil {
		t.Fatalf("1.1.0 release: %v", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour', written_xact = pg_current_xact_id() WHERE order_id = 'ord-c'`); err != nil {
		t.Fatal(err)
	}
	rows, _ := pool.Query(ctx, v110SQLClaimPending, time.Minute.Seconds(), 10, 1.0, 60.0)
	if claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var vals []any
		vals, err := row.Values()
		if err != nil {
			return "", err
		}
		return vals[0].(string), nil
	}); err != nil || len(claimed) != 1 {
		t.Fatalf("1.1.0 claim = %v, %v, want ord-c", claimed, err)
	}
	if id, alive := attemptOf(ctx, t, pool, "ord-c"); alive {
		t.Errorf("after 1.1.0's claim, attempt %d is alive: its claim was taken for 1.0.0's", id)
	}
	var held bool
	if err := pool.QueryRow(ctx, v110SQLTakeAttempt, "ord-c", k3, int64(32), terms.Life.Seconds(), terms.HoldAfter.Seconds(),
		order.ReasonKeyAged, true).Scan(&held); err != nil || held {
		t.Fatalf("1.1.0 take = held %v, %v", held, err)
	}
	if id, alive := attemptOf(ctx, t, pool, "ord-c"); id != 32 || !alive {
		t.Errorf("1.1.0's completer's attempt = %d (alive %v), want 32 alive", id, alive)
	}

	// Held by its key's age, then resolved by a person with 1.1.0's
	// statement.
	k4 := newEventID(t)
	old.reserve(ctx, t, "ord-d", k4, 41)
	if _, err := pool.Exec(ctx, `UPDATE invoice SET key_sent_at = now() - interval '2 days', attempt_until = NULL WHERE order_id = 'ord-d'`); err != nil {
		t.Fatal(err)
	}
	rows, _ = pool.Query(ctx, v110SQLHoldStale, terms.HoldAfter.Seconds(), order.ReasonKeyAged, true)
	if heldOrders, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(heldOrders) != 1 {
		t.Fatalf("1.1.0 hold stale = %v, %v, want ord-d", heldOrders, err)
	}
	rows, _ = pool.Query(ctx, v110SQLResolve, "ord-d", "charged", "ch_found", true)
	if _, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (any, error) { return row.Values() }); err != nil {
		t.Fatalf("1.1.0 resolve: %v", err)
	}
	wantEvents(ctx, t, pool, "ord-d", transition{k4, order.StatusHeld, 0}, transition{k4, order.StatusCharged, 0})

	// Its relay's claim reads this release's outbox.
	var snap string
	if err := pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		t.Fatal(err)
	}
	rows, _ = pool.Query(ctx, v110SQLClaimOutbox, 100, snap)
	if claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (any, error) { return row.Values() }); err != nil || len(claimed) != 3 {
		t.Errorf("1.1.0's relay claims %d events, %v, want the oldest of each of the 3 orders with events", len(claimed), err)
	}
}

// TestGroupedStatementsOfOlderReleases: the grouped forms of 1.0.0's and
// 1.1.0's reserve and settle (a pod with many events in flight sends
// those), and 1.1.0's relay flush, run on this schema, and what they
// decide is published once: 1.0.0's by the triggers, 1.1.0's by itself.
func TestGroupedStatementsOfOlderReleases(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	orders := []string{"ord-g1", "ord-g2"}

	// 1.0.0: two orders reserved and charged in one statement each.
	keys := []uuid.UUID{newEventID(t), newEventID(t)}
	b := &pgx.Batch{}
	b.Queue(v100SQLReservePrelude)
	b.Queue(v100SQLReserveGroup, orders, keys, []string{"c", "c"}, []int64{100, 100}, []string{"EUR", "EUR"}, group)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("1.0.0 grouped reserve: %v", err)
	}
	// Its own attempts, still alive, are no fence-aware release's: the
	// settle is applied.
	if tag, err := pool.Exec(ctx, v100SQLSettleGroup, orders, keys, []string{"charged", "charged"}, []string{"ch1", "ch2"}); err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("1.0.0 grouped settle = %v, %v, want 2 rows", tag, err)
	}
	for i, o := range orders {
		wantEvents(ctx, t, pool, o, transition{keys[i], order.StatusCharged, 0})
	}

	// 1.1.0: two more, with attempts, reserved, read and settled grouped.
	orders110 := []string{"ord-g3", "ord-g4"}
	keys110 := []uuid.UUID{newEventID(t), newEventID(t)}
	attempts := []int64{301, 302}
	b = &pgx.Batch{}
	b.Queue(v110SQLReservePrelude)
	b.Queue(v110SQLReserveGroup, orders110, keys110, []string{"c", "c"}, []int64{100, 100}, []string{"EUR", "EUR"}, attempts, group,
		terms.Life.Seconds(), terms.HoldAfter.Seconds(), order.ReasonKeyAged, true)
	b.Queue(v110SQLInvoicesForUpdate, orders110)
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("1.1.0 grouped reserve: %v", err)
	}
	rows, _ := pool.Query(ctx, v110SQLSettleGroup, orders110, keys110, attempts, []string{"charged", "declined"}, []string{"ch3", ""},
		[]string{"", ""}, []string{traceparent110, traceparent110}, true)
	if moved, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(moved) != 2 {
		t.Fatalf("1.1.0 grouped settle = %v, %v, want both moved", moved, err)
	}
	wantEvents(ctx, t, pool, "ord-g3", transition{keys110[0], order.StatusCharged, 0})
	wantEvents(ctx, t, pool, "ord-g4", transition{keys110[1], order.StatusDeclined, 0})
	if _, err := pool.Exec(ctx, v110SQLFlushWAL); err != nil {
		t.Errorf("1.1.0's relay flush: %v", err)
	}
}
