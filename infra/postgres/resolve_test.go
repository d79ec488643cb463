package postgres_test

import (
	"errors"
	"sync"
	"testing"
	"time"

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
			before, after, err := store.Resolve(ctx, "ord-1", tt.decision, holdAfter)
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

// TestResolveRefusesWhatIsNotHeld: only a held invoice is a person's to
// decide; two people deciding at once make one decision.
func TestResolveRefusesWhatIsNotHeld(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	charged := order.Resolution{Status: order.StatusCharged, ChargeID: "ch"}
	if _, _, err := store.Resolve(ctx, "ord-none", charged, time.Hour); !errors.Is(err, order.ErrNoInvoice) {
		t.Errorf("Resolve(no invoice) error = %v, want ErrNoInvoice", err)
	}
	if _, err := store.Reserve(ctx, pendingInvoice("ord-pending", newEventID(t)), group, terms); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Resolve(ctx, "ord-pending", charged, time.Hour); !errors.Is(err, order.ErrNotHeld) {
		t.Errorf("Resolve(pending) error = %v, want ErrNotHeld", err)
	}
	if _, _, err := store.Resolve(ctx, "ord-pending", order.Resolution{Status: order.StatusHeld}, time.Hour); err == nil {
		t.Error("Resolve(to held) accepted")
	}

	heldInvoice(t, store, "ord-held")
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for i, d := range []order.Resolution{charged, {Status: order.StatusRejected}} {
		wg.Go(func() { _, _, errs[i] = store.Resolve(ctx, "ord-held", d, time.Hour) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || (!errors.Is(errs[0], order.ErrNotHeld) && !errors.Is(errs[1], order.ErrNotHeld)) {
		t.Errorf("two resolves at once: errors %v, %v; want one decision and one ErrNotHeld", errs[0], errs[1])
	}
}
