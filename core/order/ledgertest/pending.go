package ledgertest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// PendingScenarios returns order.PendingLedger's contract: what the
// pending completer may count on, whatever keeps the invoices (README,
// "How it bills once").
func PendingScenarios() []StoreScenario {
	return []StoreScenario{
		{"a pending invoice is claimed once older than asked", pendingOlderThan},
		{"only pending invoices are claimed", pendingOnly},
		{"a claim takes at most its limit, the oldest key first", pendingLimitOldestFirst},
		{"a claimed invoice waits out its back-off", pendingBackoff},
		{"an invoice whose attempt lives is not claimed, nor put off", pendingLiveAttempt},
		{"claims at once share no invoice", pendingClaimsAtOnce},
		{"the stats count pending and held invoices and age the oldest", pendingStats},
		{"stale keys are held, with their events; live attempts and young keys are not", pendingHoldStale},
	}
}

// RunPending runs every scenario of order.PendingLedger's contract on a
// store of its own from newStore, each a parallel subtest.
func RunPending(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	runStore(t, PendingScenarios(), newStore)
}

// claimAll is a claim of every due invoice, put off for an hour.
func claimAll(olderThan time.Duration) order.PendingClaim {
	return order.PendingClaim{OlderThan: olderThan, Limit: 1000, Backoff: time.Hour, MaxBackoff: time.Hour}
}

// claim claims c and returns the claimed orders, in the claim's order.
func claim(ctx context.Context, t *testing.T, s order.PendingLedger, c order.PendingClaim) []string {
	t.Helper()
	invs, err := s.ClaimPending(ctx, c)
	if err != nil {
		t.Fatalf("ClaimPending(%+v) error = %v", c, err)
	}
	out := make([]string, len(invs))
	for i, inv := range invs {
		if inv.Status != order.StatusPending || inv.CustomerID != "cus-"+inv.OrderID || inv.Amount != 12990 {
			t.Errorf("claimed invoice %+v, want the pending invoice as it was opened", inv)
		}
		out[i] = inv.OrderID
	}
	return out
}

func pendingOlderThan(ctx context.Context, t *testing.T, s Store) {
	open(ctx, t, s, "A", ended)
	afterExpiry()
	if got := claim(ctx, t, s, claimAll(time.Hour)); len(got) != 0 {
		t.Errorf("a claim of invoices older than an hour took %v, want none", got)
	}
	if got := claim(ctx, t, s, claimAll(0)); !slices.Equal(got, []string{"A"}) {
		t.Errorf("a claim of any age took %v, want A", got)
	}
}

func pendingOnly(ctx context.Context, t *testing.T, s Store) {
	for id, status := range map[string]order.InvoiceStatus{"C": order.StatusCharged, "D": order.StatusDeclined,
		"R": order.StatusRejected, "H": order.StatusHeld} {
		decide(ctx, t, s, id, status)
	}
	open(ctx, t, s, "P", ended)
	afterExpiry()
	if got := claim(ctx, t, s, claimAll(0)); !slices.Equal(got, []string{"P"}) {
		t.Errorf("claimed %v, want only the pending P", got)
	}
}

func pendingLimitOldestFirst(ctx context.Context, t *testing.T, s Store) {
	for _, id := range []string{"c", "a", "b"} { // opened in this order
		open(ctx, t, s, id, ended)
	}
	afterExpiry()
	c := claimAll(0)
	c.Limit = 2
	if got := claim(ctx, t, s, c); !slices.Equal(got, []string{"c", "a"}) {
		t.Errorf("first claim of 2 took %v, want the two oldest keys, oldest first: [c a]", got)
	}
	if got := claim(ctx, t, s, c); !slices.Equal(got, []string{"b"}) {
		t.Errorf("second claim of 2 took %v, want [b]", got)
	}
}

func pendingBackoff(ctx context.Context, t *testing.T, s Store) {
	open(ctx, t, s, "long", ended)
	open(ctx, t, s, "short", ended)
	afterExpiry()
	longWait := claimAll(0)
	longWait.Limit = 1
	if got := claim(ctx, t, s, longWait); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("claimed %v, want long", got)
	}
	shortWait := order.PendingClaim{Limit: 10, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	if got := claim(ctx, t, s, shortWait); !slices.Equal(got, []string{"short"}) {
		t.Fatalf("claimed %v, want short (long waits its hour)", got)
	}
	// short is due again once its millisecond has passed; long is not.
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		got := claim(ctx, t, s, shortWait)
		if slices.Equal(got, []string{"short"}) {
			return
		}
		if len(got) != 0 || time.Now().After(deadline) {
			t.Fatalf("claimed %v, want short again once its back-off passed, and never long", got)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

func pendingLiveAttempt(ctx context.Context, t *testing.T, s Store) {
	liveKey, attempt := open(ctx, t, s, "live", live)
	open(ctx, t, s, "ended", ended)
	afterExpiry()
	if got := claim(ctx, t, s, claimAll(0)); !slices.Equal(got, []string{"ended"}) {
		t.Fatalf("claimed %v, want only the invoice whose attempt ended: another's take would be refused", got)
	}
	if err := s.Release(ctx, "live", liveKey, attempt, ""); err != nil {
		t.Fatal(err)
	}
	// Left alone by the first claim, it is due as soon as its attempt ends,
	// not an hour later.
	if got := claim(ctx, t, s, claimAll(0)); !slices.Equal(got, []string{"live"}) {
		t.Errorf("claimed %v once its attempt ended, want live", got)
	}
}

func pendingClaimsAtOnce(ctx context.Context, t *testing.T, s Store) {
	const n = 20
	for i := range n {
		open(ctx, t, s, string(rune('a'+i)), ended)
	}
	afterExpiry()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   [2][]order.Invoice
		errs  [2]error
	)
	for i := range 2 {
		wg.Go(func() {
			<-start
			got[i], errs[i] = s.ClaimPending(ctx, claimAll(0))
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		for _, inv := range got[i] {
			seen[inv.OrderID]++
		}
	}
	if len(seen) != n {
		t.Errorf("the two claims took %d invoices in all, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s claimed %d times, want once", id, k)
		}
	}
}

func pendingStats(ctx context.Context, t *testing.T, s Store) {
	if st, err := s.PendingStats(ctx); err != nil || st.Count != 0 || st.Oldest != 0 || st.Held != 0 || !st.Reconcile.At.IsZero() {
		t.Errorf("PendingStats() of nothing = %+v, %v; want zeros", st, err)
	}
	start := time.Now()
	open(ctx, t, s, "P1", ended)
	open(ctx, t, s, "P2", live)
	decide(ctx, t, s, "H", order.StatusHeld)
	decide(ctx, t, s, "C", order.StatusCharged)
	afterExpiry()
	st, err := s.PendingStats(ctx)
	if err != nil || st.Count != 2 || st.Held != 1 || st.Oldest <= 0 || st.Oldest > time.Since(start)+time.Minute {
		t.Fatalf("PendingStats() = %+v, %v; want 2 pending, 1 held, the oldest aged since the test began", st, err)
	}
	// A claim leaves the key's clock alone.
	claim(ctx, t, s, claimAll(0))
	if after, err := s.PendingStats(ctx); err != nil || after.Count != 2 || after.Oldest < st.Oldest {
		t.Errorf("PendingStats() after a claim = %+v, %v; want the oldest no younger than %v", after, err, st.Oldest)
	}
}

func pendingHoldStale(ctx context.Context, t *testing.T, s Store) {
	staleKey, _ := open(ctx, t, s, "stale", ended)
	liveKey, _ := open(ctx, t, s, "live", live)
	afterExpiry()
	if held, err := s.HoldStale(ctx, order.AttemptTerms{Life: DefaultLife}); err != nil || len(held) != 0 {
		t.Errorf("HoldStale(no key age) = %v, %v; want nothing held", held, err)
	}
	if held, err := s.HoldStale(ctx, order.AttemptTerms{Life: DefaultLife, HoldAfter: time.Hour}); err != nil || len(held) != 0 {
		t.Errorf("HoldStale(an hour) = %v, %v; want nothing held: every key is young", held, err)
	}
	aged := order.AttemptTerms{Life: DefaultLife, HoldAfter: time.Nanosecond}
	if held, err := s.HoldStale(ctx, aged); err != nil || !slices.Equal(held, []string{"stale"}) {
		t.Fatalf("HoldStale(1ns) = %v, %v; want stale only: live's attempt is alive", held, err)
	}
	for id, want := range map[string]struct {
		key    uuid.UUID
		status order.InvoiceStatus
	}{"stale": {staleKey, order.StatusHeld}, "live": {liveKey, order.StatusPending}} {
		tk, err := s.TakeAttempt(ctx, id, want.key, order.AttemptTerms{Life: DefaultLife})
		if err != nil || !tk.Found || tk.Invoice.Status != want.status {
			t.Errorf("%s = %+v, %v; want %s", id, tk, err, want.status)
		}
		if want.status == order.StatusHeld && tk.Invoice.Reason != order.ReasonKeyAged {
			t.Errorf("%s held with reason %q, want the key's age", id, tk.Invoice.Reason)
		}
	}
	got := pass(ctx, t, s, 10)
	if len(got) != 1 {
		t.Fatalf("published %+v, want stale's InvoiceHeld", got)
	}
	wantEvent(t, got[0], "stale", staleKey, order.StatusHeld, 0)
}
