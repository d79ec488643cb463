package postgres_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestInvoiceAnswersAreRecorded: the gateway's answers to an invoice's
// attempts are kept on the invoice by the statements that run anyway: a
// release's (503), a settle's (201), and, for an attempt that ended with
// neither (a timeout), the next take's "no answer recorded"; the newest 16.
func TestInvoiceAnswersAreRecorded(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	key := newEventID(t)
	// The first attempt times out: its life ends with no answer.
	if _, err := store.Reserve(ctx, pendingInvoice("ord-1", key), group, ended); err != nil {
		t.Fatal(err)
	}
	// The event again (a retry tier): it takes the attempt, then the
	// gateway answers 503 without executing it.
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", key), group, terms)
	if err != nil || r.Attempt == 0 {
		t.Fatalf("Reserve() = %+v, %v; want the attempt", r, err)
	}
	if err := store.Release(ctx, "ord-1", key, r.Attempt, "503"); err != nil {
		t.Fatal(err)
	}
	// The pending completer resumes it: charged.
	tk, err := store.TakeAttempt(ctx, "ord-1", key, terms)
	if err != nil || tk.Attempt == 0 {
		t.Fatalf("TakeAttempt() = %+v, %v; want the attempt", tk, err)
	}
	if ok, err := store.Settle(ctx, order.Settlement{OrderID: "ord-1", Key: key, Attempt: tk.Attempt, Status: order.StatusCharged,
		ChargeID: "ch_1", Answer: "201"}); err != nil || !ok {
		t.Fatalf("Settle() = %v, %v", ok, err)
	}
	d, err := store.ShowInvoice(ctx, "ord-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range d.Answers {
		if a.Key != key || a.At.IsZero() || a.At.After(d.Now) {
			t.Errorf("answer %+v: want under %s, at a time up to now (%s)", a, key, d.Now)
		}
		got = append(got, a.Answer)
	}
	if want := []string{order.AnswerNone, "503", "201"}; !slices.Equal(got, want) {
		t.Errorf("answers = %q, want %q", got, want)
	}
	if d.Status != order.StatusCharged || d.ChargeID != "ch_1" || d.AttemptAlive || d.OutboxWaiting != 1 {
		t.Errorf("ShowInvoice() = %+v; want charged ch_1, no attempt alive, its event waiting in the outbox", d)
	}

	// Bounded: the newest 16 of 20 more.
	key2 := newEventID(t)
	if _, err := store.Reserve(ctx, pendingInvoice("ord-2", key2), group, terms); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET attempt_until = NULL WHERE order_id = 'ord-2'`); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		tk, err := store.TakeAttempt(ctx, "ord-2", key2, terms)
		if err != nil || tk.Attempt == 0 {
			t.Fatalf("TakeAttempt() = %+v, %v", tk, err)
		}
		if err := store.Release(ctx, "ord-2", key2, tk.Attempt, fmt.Sprintf("5%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	d, err = store.ShowInvoice(ctx, "ord-2")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Answers) != 16 || d.Answers[0].Answer != "504" || d.Answers[15].Answer != "519" {
		t.Errorf("answers = %+v, want the newest 16, 504 to 519", d.Answers)
	}
}

// TestListInvoices: held first, then pending, each oldest first, then
// rejected and the settled ones newest first; by status, by age, bounded.
func TestListInvoices(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	// order, status, hours in it
	for _, inv := range []struct {
		id     string
		status order.InvoiceStatus
		hours  int
	}{
		{"charged-old", order.StatusCharged, 30}, {"charged-new", order.StatusCharged, 1}, {"declined", order.StatusDeclined, 2},
		{"rejected", order.StatusRejected, 40}, {"pending-new", order.StatusPending, 1}, {"pending-old", order.StatusPending, 5},
		{"held-new", order.StatusHeld, 2}, {"held-old", order.StatusHeld, 20},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, updated_at, key_sent_at)
			VALUES ($1, $2, 'cus-1', 100, 'EUR', $3, now() - make_interval(hours => $4), now() - make_interval(hours => $4))`,
			inv.id, newEventID(t), string(inv.status), inv.hours); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(f postgres.InvoiceFilter) string {
		t.Helper()
		list, err := store.ListInvoices(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list {
			if s.Age < time.Duration(0) || s.Since.IsZero() {
				t.Errorf("%s: age %v since %v", s.OrderID, s.Age, s.Since)
			}
			out = append(out, s.OrderID)
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		f    postgres.InvoiceFilter
		want string
	}{
		{postgres.InvoiceFilter{Limit: 50}, "held-old held-new pending-old pending-new rejected charged-new declined charged-old"},
		{postgres.InvoiceFilter{Limit: 3}, "held-old held-new pending-old"},
		{postgres.InvoiceFilter{Limit: 50, OlderThan: 3 * time.Hour}, "held-old pending-old rejected charged-old"},
		{postgres.InvoiceFilter{Limit: 50, Status: order.StatusCharged}, "charged-new charged-old"},
		{postgres.InvoiceFilter{Limit: 50, Status: order.StatusHeld, OlderThan: 10 * time.Hour}, "held-old"},
		{postgres.InvoiceFilter{Limit: 50, Status: order.StatusPending}, "pending-old pending-new"},
	} {
		if got := ids(tt.f); got != tt.want {
			t.Errorf("ListInvoices(%+v) = %s, want %s", tt.f, got, tt.want)
		}
	}
}

// TestShowInvoice: one invoice with its live attempt, its completer's
// resumes, and every decision made on it, oldest first.
func TestShowInvoice(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	if _, err := store.ShowInvoice(ctx, "ord-none"); !errors.Is(err, order.ErrNoInvoice) {
		t.Errorf("ShowInvoice(no invoice) error = %v, want ErrNoInvoice", err)
	}
	inv := heldInvoice(t, store, "ord-1")
	if _, _, err := store.Resolve(ctx, "ord-1", order.Resolution{Status: order.StatusPending, Key: inv.EventID, By: "alice", Note: "one more try"},
		12*time.Hour); err != nil {
		t.Fatal(err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
	if err != nil || r.Attempt == 0 {
		t.Fatalf("Reserve() = %+v, %v; want the resumed invoice's attempt", r, err)
	}
	d, err := store.ShowInvoice(ctx, "ord-1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != order.StatusPending || d.EventID != inv.EventID || !d.AttemptAlive || d.AttemptID != r.Attempt ||
		!d.AttemptUntil.After(d.Now) || d.Reopens != 1 {
		t.Errorf("ShowInvoice() = %+v; want pending under its key, reopened once, with the reserve's attempt alive", d)
	}
	if len(d.Decisions) != 1 {
		t.Fatalf("decisions = %+v, want alice's", d.Decisions)
	}
	dec := d.Decisions[0]
	if dec.By != "alice" || dec.Command != order.CommandInvoiceResolve || dec.Key != inv.EventID || dec.Before != "held" ||
		dec.After != "pending" || dec.Reason != order.ReasonKeyReused || dec.Note != "one more try" || dec.At.After(d.Now) {
		t.Errorf("decision = %+v, want alice's resume of the hold, with its reason and note", dec)
	}
}
