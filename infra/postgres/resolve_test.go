package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// heldInvoice reserves orderID's invoice and holds it as a 422 does, its
// key first sent sentAgo ago.
func heldInvoice(t *testing.T, store *postgres.Store, orderID string) order.Invoice {
	t.Helper()
	ctx := testCtx(t)
	r, err := store.Reserve(ctx, pendingInvoice(orderID, newEventID(t)), group, terms)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Settle(ctx, order.Settlement{OrderID: orderID, Key: r.Invoice.EventID, Attempt: r.Attempt,
		Status: order.StatusHeld, Reason: order.ReasonKeyReused}); err != nil || !ok {
		t.Fatalf("Settle(held) = %v, %v", ok, err)
	}
	return r.Invoice
}

// TestResolve: a person's decisions on a held invoice (billing invoice
// resolve), and what is refused.
func TestResolve(t *testing.T) {
	t.Parallel()
	const holdAfter = 12 * time.Hour
	tests := []struct {
		name     string
		decision order.Resolution
		keyAge   time.Duration // how long ago its key was first sent
		wantErr  error
		want     order.InvoiceStatus
	}{
		{"charged, with the gateway's charge id", order.Resolution{Status: order.StatusCharged, ChargeID: "ch_found"}, time.Hour, nil, order.StatusCharged},
		{"declined", order.Resolution{Status: order.StatusDeclined}, time.Hour, nil, order.StatusDeclined},
		{"rejected", order.Resolution{Status: order.StatusRejected}, 20 * time.Hour, nil, order.StatusRejected},
		{"resumed while the key is young", order.Resolution{Status: order.StatusPending}, time.Hour, nil, order.StatusPending},
		{"resume refused past half the key's lifetime", order.Resolution{Status: order.StatusPending}, 13 * time.Hour, order.ErrKeyTooOld, order.StatusHeld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, _ := pgtest.NewDB(t)
			store := postgres.NewStore(pool)
			inv := heldInvoice(t, store, "ord-1")
			if _, err := pool.Exec(ctx, `UPDATE invoice SET key_sent_at = now() - make_interval(secs => $1), updated_at = now() - make_interval(secs => $1)`,
				tt.keyAge.Seconds()); err != nil {
				t.Fatal(err)
			}
			d := tt.decision
			d.Key, d.By = inv.EventID, "alice"
			before, after, err := store.Resolve(ctx, "ord-1", d, holdAfter)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Resolve() error = %v, want %v", err, tt.wantErr)
			}
			if err == nil && (before.Status != order.StatusHeld || before.Reason != order.ReasonKeyReused || after.Status != tt.want ||
				after.ChargeID != tt.decision.ChargeID || after.EventID != inv.EventID) {
				t.Errorf("Resolve() = before %+v, after %+v; want held with its reason, then %s under the same key", before, after, tt.want)
			}
			if got := invoiceOf(ctx, t, store, "ord-1"); got.Status != tt.want {
				t.Errorf("invoice = %s, want %s", got.Status, tt.want)
			}
			switch tt.want {
			case order.StatusPending:
				// One more automatic attempt: due for the completer at
				// once, under its key, which any path may take.
				st, err := store.PendingStats(ctx)
				if err != nil || st.Count != 1 || st.Held != 0 || st.Oldest < tt.keyAge-time.Minute {
					t.Errorf("PendingStats() = %+v, %v, want 1 pending, as old as its key (%v)", st, err, tt.keyAge)
				}
				claimed, err := store.ClaimPending(ctx, order.PendingClaim{OlderThan: time.Minute, Limit: 10, Backoff: time.Minute, MaxBackoff: time.Hour})
				if err != nil || len(claimed) != 1 {
					t.Fatalf("ClaimPending() = %d, %v, want the resumed invoice", len(claimed), err)
				}
				if tk, err := store.TakeAttempt(ctx, "ord-1", inv.EventID, order.AttemptTerms{Life: time.Minute, HoldAfter: holdAfter}); err != nil || tk.Attempt == 0 {
					t.Errorf("TakeAttempt() = %+v, %v, want the attempt", tk, err)
				}
			case order.StatusRejected:
				// The order's next event reopens it under its own key.
				r, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
				if err != nil || !r.Reopened || r.Attempt == 0 {
					t.Errorf("Reserve() after --rejected = %+v, %v, want reopened with its attempt", r, err)
				}
			}
		})
	}
}

// TestResolveRefusesWhatIsNotHeld: only a held invoice, or a pending one
// past half of its key's lifetime, is a person's to decide; two people
// deciding at once make one decision.
func TestResolveRefusesWhatIsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	charged := order.Resolution{Status: order.StatusCharged, ChargeID: "ch", By: "alice"}
	if _, _, err := store.Resolve(ctx, "ord-none", charged, time.Hour); !errors.Is(err, order.ErrNoInvoice) {
		t.Errorf("Resolve(no invoice) error = %v, want ErrNoInvoice", err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-pending", newEventID(t)), group, terms)
	if err != nil {
		t.Fatal(err)
	}
	young := charged
	young.Key = r.Invoice.EventID
	if _, _, err := store.Resolve(ctx, "ord-pending", young, time.Hour); !errors.Is(err, order.ErrNotHeld) {
		t.Errorf("Resolve(pending, its key young) error = %v, want ErrNotHeld", err)
	}
	if _, _, err := store.Resolve(ctx, "ord-pending", order.Resolution{Status: order.StatusHeld, Key: r.Invoice.EventID, By: "alice"}, time.Hour); err == nil {
		t.Error("Resolve(to held) accepted")
	}

	inv := heldInvoice(t, store, "ord-held")
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for i, d := range []order.Resolution{charged, {Status: order.StatusRejected, By: "bob"}} {
		d.Key = inv.EventID
		wg.Go(func() { _, _, errs[i] = store.Resolve(ctx, "ord-held", d, time.Hour) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || (!errors.Is(errs[0], order.ErrNotHeld) && !errors.Is(errs[1], order.ErrNotHeld)) {
		t.Errorf("two resolves at once: errors %v, %v; want one decision and one ErrNotHeld", errs[0], errs[1])
	}
}

// decisionRow is one row of the decision table.
type decisionRow struct {
	By, Command, OrderID, Key, Before, After, ChargeID, ReasonBefore, Note string
}

// decisionsOf returns the decisions on orderID, oldest first.
func decisionsOf(ctx context.Context, t *testing.T, pool *pgxpool.Pool, orderID string) []decisionRow {
	t.Helper()
	rows, _ := pool.Query(ctx, `SELECT decided_by, command, order_id, idempotency_key::text, status_before, status_after,
			coalesce(charge_id, ''), coalesce(reason_before, ''), coalesce(note, '')
		FROM decision WHERE order_id = $1 ORDER BY id`, orderID)
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (decisionRow, error) {
		var d decisionRow
		err := row.Scan(&d.By, &d.Command, &d.OrderID, &d.Key, &d.Before, &d.After, &d.ChargeID, &d.ReasonBefore, &d.Note)
		return d, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestResolvePendingPastHalfTheKeyTTL: BillingInvoicesPendingKeyExpiring's
// runbook records the gateway's records on a pending invoice whose key is
// past half of BILLING_GATEWAY_KEY_TTL when no completer holds it. Today's
// main refused it: "invoice is not held".
func TestResolvePendingPastHalfTheKeyTTL(t *testing.T) {
	t.Parallel()
	const holdAfter = 12 * time.Hour
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
	if err != nil {
		t.Fatal(err)
	}
	key := r.Invoice.EventID
	// Its key sent 13 hours ago, and its attempt still alive: the request
	// may be at the gateway, so no decision yet.
	if _, err := pool.Exec(ctx, `UPDATE invoice SET key_sent_at = now() - interval '13 hours', updated_at = now() - interval '13 hours',
			attempt_until = now() + interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	rejected := order.Resolution{Status: order.StatusRejected, Key: key, By: "alice", Note: "no charge at the gateway under the key"}
	if _, _, err := store.Resolve(ctx, "ord-1", rejected, holdAfter); !errors.As(err, new(*order.AttemptBusyError)) {
		t.Fatalf("Resolve(pending, its attempt alive) error = %v, want an AttemptBusyError", err)
	}
	// The attempt ended without an answer (a timeout): the person decides.
	if _, err := pool.Exec(ctx, `UPDATE invoice SET attempt_until = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	resume := rejected
	resume.Status = order.StatusPending
	if _, _, err := store.Resolve(ctx, "ord-1", resume, holdAfter); !errors.Is(err, order.ErrKeyTooOld) {
		t.Errorf("Resolve(--resume, pending past half the TTL) error = %v, want ErrKeyTooOld", err)
	}
	before, after, err := store.Resolve(ctx, "ord-1", rejected, holdAfter)
	if err != nil {
		t.Fatalf("Resolve(--rejected, pending past half the TTL) = %v", err)
	}
	if before.Status != order.StatusPending || after.Status != order.StatusRejected || after.EventID != key {
		t.Errorf("Resolve() = before %s, after %s under %s; want pending, then rejected under %s", before.Status, after.Status, after.EventID, key)
	}
	want := []decisionRow{{By: "alice", Command: order.CommandInvoiceResolve, OrderID: "ord-1", Key: key.String(),
		Before: "pending", After: "rejected", Note: rejected.Note}}
	if got := decisionsOf(ctx, t, pool, "ord-1"); !slices.Equal(got, want) {
		t.Errorf("decisions = %+v, want %+v", got, want)
	}
	var status string
	if err := pool.QueryRow(ctx, `SELECT status FROM invoice_outbox WHERE order_id = 'ord-1'`).Scan(&status); err != nil || status != "rejected" {
		t.Errorf("outbox = %q, %v; want the InvoiceRejected event", status, err)
	}
	// The attempt that ended unanswered is in the invoice's history.
	var answers []string
	if err := pool.QueryRow(ctx, `SELECT answers FROM invoice WHERE order_id = 'ord-1'`).Scan(&answers); err != nil ||
		len(answers) != 1 || !strings.HasSuffix(answers[0], key.String()+" "+order.AnswerNone) {
		t.Errorf("answers = %q, %v; want the attempt that ended unanswered", answers, err)
	}
}

// TestResolveAppliesToTheKeyLookedAt: a decision names the key whose
// gateway records the person read; the same decision applied to the
// order's later attempt, under another key, is refused.
func TestResolveAppliesToTheKeyLookedAt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	k1 := heldInvoice(t, store, "ord-1").EventID
	// A person rejects K1's hold; the order's next event reopens it under
	// K2, which is held in turn.
	if _, _, err := store.Resolve(ctx, "ord-1", order.Resolution{Status: order.StatusRejected, Key: k1, By: "alice"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
	if err != nil || !r.Reopened {
		t.Fatalf("Reserve() = %+v, %v; want the order reopened", r, err)
	}
	k2 := r.Invoice.EventID
	if ok, err := store.Settle(ctx, order.Settlement{OrderID: "ord-1", Key: k2, Attempt: r.Attempt, Status: order.StatusHeld,
		Reason: order.ReasonKeyReused, Answer: "422"}); err != nil || !ok {
		t.Fatalf("Settle(held) = %v, %v", ok, err)
	}
	// A second person (or the first one's retried runbook step) applies
	// what K1's records showed.
	_, _, err = store.Resolve(ctx, "ord-1", order.Resolution{Status: order.StatusCharged, ChargeID: "ch_k1", Key: k1, By: "bob"}, time.Hour)
	if !errors.Is(err, order.ErrOtherKey) || !strings.Contains(err.Error(), k2.String()) {
		t.Errorf("Resolve(key K1, invoice under K2) error = %v, want ErrOtherKey naming %s", err, k2)
	}
	if got := invoiceOf(ctx, t, store, "ord-1"); got.Status != order.StatusHeld || got.EventID != k2 {
		t.Errorf("invoice = %s under %s, want still held under K2", got.Status, got.EventID)
	}
	if got := decisionsOf(ctx, t, pool, "ord-1"); len(got) != 1 || got[0].Key != k1.String() {
		t.Errorf("decisions = %+v, want alice's on K1 only", got)
	}
}

// TestResolveKeepsTheHoldsReason: --charged and --declined keep the
// invoice's reason, and the decision keeps the hold's reason whatever the
// invoice's becomes; decisions are never changed or removed.
func TestResolveKeepsTheHoldsReason(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	for _, st := range []order.InvoiceStatus{order.StatusCharged, order.StatusDeclined, order.StatusRejected} {
		orderID := "ord-" + string(st)
		inv := heldInvoice(t, store, orderID)
		d := order.Resolution{Status: st, Key: inv.EventID, By: "carol", Note: "gateway dashboard, charge list of the day"}
		if st == order.StatusCharged {
			d.ChargeID = "ch_found"
		}
		_, after, err := store.Resolve(ctx, orderID, d, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		wantReason := order.ReasonKeyReused
		if st == order.StatusRejected {
			wantReason = "rejected by a person (billing invoice resolve)"
		}
		if after.Reason != wantReason {
			t.Errorf("%s: reason after = %q, want %q", st, after.Reason, wantReason)
		}
		got := decisionsOf(ctx, t, pool, orderID)
		if len(got) != 1 || got[0].ReasonBefore != order.ReasonKeyReused || got[0].Before != "held" || got[0].After != string(st) ||
			got[0].ChargeID != d.ChargeID || got[0].By != "carol" || got[0].Note != d.Note {
			t.Errorf("%s: decisions = %+v, want carol's, held to %s, with the hold's reason and her note", st, got, st)
		}
	}
	for _, stmt := range []string{`UPDATE decision SET decided_by = 'mallory'`, `DELETE FROM decision`, `TRUNCATE decision`} {
		if _, err := pool.Exec(ctx, stmt); err == nil {
			t.Errorf("%s: accepted, want the decisions kept", stmt)
		}
	}
}
