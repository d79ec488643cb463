package postgres_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service/completer"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// triggerFunctions are migration 0006's trigger functions: what a writer
// other than this release costs each of its invoice writes.
var triggerFunctions = []string{"invoice_fence_aware", "invoice_legacy_insert", "invoice_legacy_update",
	"processed_event_legacy_reserve"}

// functionCalls returns how many times each of triggerFunctions ran in
// pool's database, as the statistics say once the sessions that ran them
// have ended.
func functionCalls(ctx context.Context, t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	rows, _ := pool.Query(ctx, `SELECT funcname, calls FROM pg_stat_user_functions WHERE funcname = ANY ($1)`, triggerFunctions)
	for rows.Next() {
		var (
			name string
			n    int64
		)
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		calls[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return calls
}

// closeAndFlush closes p and waits until its sessions have ended, which
// flushes their statistics.
func closeAndFlush(ctx context.Context, t *testing.T, p, observer *pgxpool.Pool) {
	t.Helper()
	p.Close()
	poll.Until(t, "the pool's sessions to end", 10*time.Second, func() bool {
		var n int
		err := observer.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
			AND backend_type = 'client backend' AND application_name = 'billing-stamp-test'`).Scan(&n)
		return err == nil && n == 0
	})
}

// TestThisReleaseSkipsTheTriggers: every statement of this release that
// writes invoice stamps it, so migration 0006's triggers never run for
// them (their WHEN clauses skip the row): reserves (new, reopened, taken,
// held), settles (charged, declined, rejected, held), the completer's claim
// and take, attempts given back, holds by age and a person's decision. One
// write of 1.0.0 afterwards shows that the statistics do count the
// trigger functions.
func TestThisReleaseSkipsTheTriggers(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	observer, dsn := pgtest.NewDB(t)
	if _, err := observer.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET track_functions = ''pl''', current_database()); END $$`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "billing-stamp-test"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	store := postgres.NewStore(pool, postgres.WithEvents(true))
	stub, client := startStub(t)
	svc := order.NewBillingService(store, client, group)
	bill := func(evt order.OrderConfirmedEvent) {
		t.Helper()
		if _, err := billUntilFinal(ctx, t, svc, evt); err != nil && order.Classify(err) != order.ClassPermanent {
			t.Fatalf("Bill(%s) error = %v", evt.OrderID, err)
		}
	}
	bill(event(t, "ord-charged"))
	declined := event(t, "ord-declined")
	declineKey(stub, declined.EventID)
	bill(declined)
	rejected := event(t, "ord-rejected")
	stop := refuseKey(stub, rejected.EventID, http.StatusNotFound)
	bill(rejected)
	stop()
	bill(event(t, "ord-rejected")) // reopened and charged
	held := event(t, "ord-held")
	stop = refuseKey(stub, held.EventID, http.StatusUnprocessableEntity)
	bill(held)
	stop()
	if _, _, err := store.Resolve(ctx, "ord-held", order.Resolution{Status: order.StatusPending, Key: held.EventID, By: "test"}, terms.HoldAfter); err != nil {
		t.Fatalf("Resolve(--resume) error = %v", err)
	}
	pendingAfter503(ctx, t, stub, svc, event(t, "ord-completed"))
	if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour', written_xact = pg_current_xact_id() WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	c := completer.New(store, svc, completer.Options{ResumeAfter: time.Minute})
	if _, err := c.Pass(ctx); err != nil {
		t.Fatalf("completer pass: %v", err)
	}
	aged := event(t, "ord-aged")
	if _, err := store.Reserve(ctx, pendingInvoice(aged.OrderID, aged.EventID), group, ended); err != nil {
		t.Fatal(err)
	}
	if _, err := store.HoldStale(ctx, order.AttemptTerms{Life: terms.Life, HoldAfter: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	closeAndFlush(ctx, t, pool, observer)
	if calls := functionCalls(ctx, t, observer); len(calls) != 0 {
		t.Errorf("trigger functions ran for this release's statements: %v", calls)
	}

	// The control: a write of 1.0.0 runs them, and the statistics say so.
	legacy, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := (pod100{pool: legacy, gw: client}).reserve(ctx, event(t, "ord-legacy")); err != nil {
		t.Fatal(err)
	}
	closeAndFlush(ctx, t, legacy, observer)
	poll.Until(t, "1.0.0's insert counted in the statistics", 10*time.Second, func() bool {
		return functionCalls(ctx, t, observer)["invoice_legacy_insert"] > 0
	})
	if calls := functionCalls(ctx, t, observer); calls["invoice_fence_aware"] != 0 {
		t.Errorf("trigger functions after 1.0.0's insert: %v, want no fence-aware stamp (its own updates are stamped)", calls)
	}
}
