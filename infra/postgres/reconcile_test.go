package postgres_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestReconcileInvoices: the invoices created in a period, and those of
// given orders whenever they were created.
func TestReconcileInvoices(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	for _, id := range []string{"ord-old", "ord-in-1", "ord-in-2", "ord-new"} {
		if _, err := store.Reserve(ctx, pendingInvoice(id, newEventID(t)), group, terms); err != nil {
			t.Fatal(err)
		}
	}
	day := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for id, at := range map[string]time.Time{"ord-old": day.Add(-time.Second), "ord-in-1": day, "ord-in-2": day.Add(24*time.Hour - time.Microsecond), "ord-new": day.Add(24 * time.Hour)} {
		if _, err := pool.Exec(ctx, `UPDATE invoice SET created_at = $2 WHERE order_id = $1`, id, at); err != nil {
			t.Fatal(err)
		}
	}
	invs, err := store.InvoicesCreated(ctx, order.Period{From: day, To: day.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, inv := range invs {
		ids = append(ids, inv.OrderID)
	}
	if !slices.Equal(ids, []string{"ord-in-1", "ord-in-2"}) {
		t.Errorf("InvoicesCreated(the day) = %v, want [ord-in-1 ord-in-2], oldest first", ids)
	}
	invs, err = store.InvoicesOf(ctx, []string{"ord-old", "ord-new", "ord-none"})
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:0]
	for _, inv := range invs {
		ids = append(ids, inv.OrderID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"ord-new", "ord-old"}) {
		t.Errorf("InvoicesOf = %v, want [ord-new ord-old]", ids)
	}
}

// TestReconcileRunKept: a run's result is kept, and the pending
// completer's stats read the newest one; before any run, none, every kind
// at 0.
func TestReconcileRunKept(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	st, err := store.PendingStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Reconcile.At.IsZero() || len(st.Reconcile.Discrepancies) != len(order.DiscrepancyKinds()) || st.Reconcile.Total() != 0 {
		t.Errorf("before any run: %+v, want no run, every kind at 0", st.Reconcile)
	}
	day := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	run := func(double, money int, by string) time.Time {
		t.Helper()
		at, err := store.RecordReconcile(ctx, postgres.ReconcileRun{
			ReconcileResult: order.ReconcileResult{Period: order.Period{From: day, To: day.Add(24 * time.Hour)}, Orders: 40,
				Discrepancies: map[order.DiscrepancyKind]int{order.DiscrepancyDoubleCharge: double, order.DiscrepancyMoneyWithoutCharged: money},
				HeldSettled:   2, HeldLeft: 1},
			Started: time.Now().Add(-time.Second), Provider: "generic", By: by, Host: "billing-reconcile-29012345-abcde"})
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	run(5, 5, "")
	at := run(1, 2, "cronjob")
	st, err = store.PendingStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := st.Reconcile
	if !r.At.Equal(at) || r.Orders != 40 || r.HeldSettled != 2 || r.HeldLeft != 1 || !r.Period.From.Equal(day) ||
		r.Discrepancies[order.DiscrepancyDoubleCharge] != 1 || r.Discrepancies[order.DiscrepancyMoneyWithoutCharged] != 2 ||
		r.Discrepancies[order.DiscrepancyAmountMismatch] != 0 || r.Total() != 3 {
		t.Errorf("newest run = %+v, want the second one (at %v: 1 double charge, 2 money without a charged invoice)", r, at)
	}
	if last, err := store.LastReconcile(ctx); err != nil || !last.At.Equal(at) {
		t.Errorf("LastReconcile() = %+v, %v, want the second run", last, err)
	}
	var by, host string
	if err := pool.QueryRow(ctx, `SELECT ran_by, ran_on FROM reconcile_run ORDER BY id DESC LIMIT 1`).Scan(&by, &host); err != nil || by != "cronjob" || host == "" {
		t.Errorf("ran_by, ran_on = %q, %q, %v; want who and where", by, host, err)
	}
	if _, err := store.RecordReconcile(ctx, postgres.ReconcileRun{ReconcileResult: order.ReconcileResult{Period: order.Period{From: day, To: day}},
		Provider: "generic", Started: time.Now()}); err == nil {
		t.Error("a run over an empty period was kept")
	}
}

// TestResolveHeldByReconcile: reconcile's decision goes the way of a
// person's (recorded as `reconcile resolve-held`, its invoice event
// written), but only on a held invoice, and only while it is the attempt
// whose records were read: not once resumed since, even under its key,
// and not on a pending invoice past half of its key's lifetime, which a
// person's command may decide.
func TestResolveHeldByReconcile(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	const holdAfter = 12 * time.Hour

	inv := heldInvoice(t, store, "ord-held")
	d := order.Resolution{Status: order.StatusCharged, ChargeID: "ch_listed", Key: inv.EventID, By: "cronjob",
		Command: order.CommandReconcileResolveHeld, Reopens: inv.Reopens, Note: "one successful charge under its key"}
	before, after, err := store.Resolve(ctx, "ord-held", d, holdAfter)
	if err != nil || before.Status != order.StatusHeld || after.Status != order.StatusCharged || after.ChargeID != "ch_listed" {
		t.Fatalf("Resolve() = %+v, %+v, %v; want held, then charged with the listed id", before, after, err)
	}
	var command, by, status string
	if err := pool.QueryRow(ctx, `SELECT command, decided_by, status_after FROM decision WHERE order_id = 'ord-held'`).Scan(&command, &by, &status); err != nil ||
		command != order.CommandReconcileResolveHeld || by != "cronjob" || status != "charged" {
		t.Errorf("decision = %q by %q to %q, %v; want reconcile resolve-held by cronjob to charged", command, by, status, err)
	}
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoice_outbox WHERE order_id = 'ord-held' AND status = 'charged'`).Scan(&events); err != nil || events != 1 {
		t.Errorf("InvoiceCharged events in the outbox = %d, %v; want 1", events, err)
	}

	// Resumed by a person and held again since its records were read: the
	// same key, another attempt.
	again := heldInvoice(t, store, "ord-again")
	resume := order.Resolution{Status: order.StatusPending, Key: again.EventID, By: "alice"}
	if _, _, err := store.Resolve(ctx, "ord-again", resume, holdAfter); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET status = 'held' WHERE order_id = 'ord-again'`); err != nil {
		t.Fatal(err)
	}
	stale := order.Resolution{Status: order.StatusDeclined, Key: again.EventID, By: "cronjob", Command: order.CommandReconcileResolveHeld, Reopens: again.Reopens}
	if _, _, err := store.Resolve(ctx, "ord-again", stale, holdAfter); !errors.Is(err, order.ErrOtherKey) {
		t.Errorf("Resolve(records read before a resume) error = %v, want ErrOtherKey", err)
	}

	// A pending invoice past half of its key's lifetime is a person's.
	r, err := store.Reserve(ctx, pendingInvoice("ord-aged", newEventID(t)), group, terms)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET key_sent_at = now() - interval '13 hours', attempt_until = NULL WHERE order_id = 'ord-aged'`); err != nil {
		t.Fatal(err)
	}
	aged := order.Resolution{Status: order.StatusDeclined, Key: r.Invoice.EventID, By: "cronjob", Command: order.CommandReconcileResolveHeld}
	if _, _, err := store.Resolve(ctx, "ord-aged", aged, holdAfter); !errors.Is(err, order.ErrNotHeld) {
		t.Errorf("Resolve(pending past half its key's lifetime) by reconcile error = %v, want ErrNotHeld", err)
	}
	if got := invoiceOf(ctx, t, store, "ord-aged"); got.Status != order.StatusPending {
		t.Errorf("ord-aged = %s, want still pending", got.Status)
	}
}
