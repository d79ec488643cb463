package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	reconciliation "github.com/acme/billing/internal/reconcile"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/stripemock"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// reconcileRun runs `billing reconcile args…` and returns its stdout and
// error.
func reconcileRun(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr syncbuf.Buffer
	err := run(ctx, append([]string{"reconcile"}, args...), &stdout, &stderr)
	t.Logf("$ billing reconcile %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String(), err
}

// found is the discrepancies of a reconcile's output: "kind order" for
// each line of one.
func found(out string) []string {
	var got []string
	for l := range strings.Lines(out) {
		for _, k := range order.DiscrepancyKinds() {
			if rest, ok := strings.CutPrefix(l, string(k)+" order "); ok {
				id, _, _ := strings.Cut(rest, ":")
				got = append(got, string(k)+" "+id)
			}
		}
	}
	return got
}

// heldLine is the line of a reconcile's output about orderID's held
// invoice.
func heldLine(out, orderID string) string {
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "held order "+orderID+" ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// plant records an attempt at the stub for orderID under key, 12990 EUR
// unless amount says otherwise.
func plant(stub *gatewaystub.Stub, orderID string, key uuid.UUID, status string, at time.Time, id string, amount int64) gatewaystub.Attempt {
	if amount == 0 {
		amount = 12990
	}
	return stub.Plant(gatewaystub.Attempt{ID: id, Key: key.String(), OrderID: orderID, CustomerID: "cus-" + orderID,
		Amount: amount, Currency: "EUR", Status: status, Time: at})
}

// settledInvoice writes orderID's invoice settled st (charged with
// chargeID, or held) under key, created at createdAt, as billing's own
// statements would (a reserve and a settle, then its creation moved back
// in time).
func settledInvoice(ctx context.Context, t *testing.T, pool *pgxpool.Pool, orderID string, key uuid.UUID, st order.InvoiceStatus, chargeID string, createdAt time.Time) {
	t.Helper()
	store := postgres.NewStore(pool)
	r, err := store.Reserve(ctx, order.Invoice{OrderID: orderID, EventID: key, CustomerID: "cus-" + orderID, Amount: 12990, Currency: "EUR",
		Status: order.StatusPending}, "billing-order-confirmed", order.AttemptTerms{Life: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Settle(ctx, order.Settlement{OrderID: orderID, Key: key, Attempt: r.Attempt, Status: st, ChargeID: chargeID, Reason: order.ReasonKeyReused}); err != nil || !ok {
		t.Fatalf("Settle = %v, %v", ok, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET created_at = $2, written_xact = pg_current_xact_id() WHERE order_id = $1`, orderID, createdAt); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileAgainstTheStub: `billing reconcile` against the stub
// gateway, whose records were planted with one order of each kind of
// discrepancy (an order charged twice under two keys; money for an order
// billing never invoiced; a charged invoice whose charge id nobody took,
// a person's typo; an order invoiced two days ago, charged then and again
// now, which only the lookup of the order shows), and with held invoices
// (a 422: nothing executed at the stub) whose records under their key
// show one success, a decline, a success of another amount, nothing, and
// a key the stub forgot after charging under it. It reports exactly the
// planted discrepancies, plus, before --resolve-held, the money under the
// held keys; --resolve-held settles what the records decide, each as a
// decision with its event, leaves the invoice without records held, and
// a run of the run is kept.
func TestReconcileAgainstTheStub(t *testing.T) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	stub := gatewaystub.New(gatewaystub.Options{PageSize: 3}) // several pages for a handful of orders
	base := stub.StartTest(t)
	t.Setenv("BILLING_PAYMENT_BASE_URL", base)
	t.Setenv("BILLING_PUBLISH_EVENTS", "true")
	stub.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		switch {
		case c.Route != "POST "+gatewaystub.Path: // the charges only, not the lookups
		case strings.HasPrefix(c.OrderID, "ord-held-"):
			return gatewaystub.Fault{Status: http.StatusUnprocessableEntity}
		case c.OrderID == "ord-forgotten":
			return gatewaystub.Fault{ResetAfterCharge: true}
		}
		return gatewaystub.Fault{}
	})
	now := time.Now()

	for _, id := range []string{"ord-ok-1", "ord-ok-2", "ord-ok-3", "ord-double"} {
		if _, err := billEvent(ctx, t, pool, base, id); err != nil {
			t.Fatalf("Bill(%s) = %v", id, err)
		}
	}
	// Charged again under a key billing never had.
	plant(stub, "ord-double", newKey(t), gatewaystub.AttemptSucceeded, time.Time{}, "", 0)
	// Money for an order billing never invoiced.
	plant(stub, "ord-uninvoiced", newKey(t), gatewaystub.AttemptSucceeded, time.Time{}, "", 0)
	// Invoiced and charged two days ago; charged again ten minutes ago.
	old := newKey(t)
	settledInvoice(ctx, t, pool, "ord-old-double", old, order.StatusCharged, "ch_two_days_ago", now.Add(-48*time.Hour))
	plant(stub, "ord-old-double", old, gatewaystub.AttemptSucceeded, now.Add(-47*time.Hour), "ch_two_days_ago", 0)
	plant(stub, "ord-old-double", newKey(t), gatewaystub.AttemptSucceeded, now.Add(-10*time.Minute), "", 0)

	// Held by a 422 that executed nothing; then the records of each.
	keys := map[string]uuid.UUID{}
	for _, id := range []string{"ord-held-charged", "ord-held-declined", "ord-held-amount", "ord-held-nothing", "ord-held-typo"} {
		evt, err := billEvent(ctx, t, pool, base, id)
		if !errors.As(err, new(*order.HeldError)) {
			t.Fatalf("Bill(%s) = %v, want held by the 422", id, err)
		}
		keys[id] = evt.EventID
	}
	plant(stub, "ord-held-charged", keys["ord-held-charged"], gatewaystub.AttemptSucceeded, time.Time{}, "ch_held", 0)
	plant(stub, "ord-held-declined", keys["ord-held-declined"], gatewaystub.AttemptDeclined, time.Time{}, "", 0)
	plant(stub, "ord-held-amount", keys["ord-held-amount"], gatewaystub.AttemptSucceeded, time.Time{}, "ch_amount", 12900)
	// A person's typo: the charge id they recorded is no charge at all.
	if _, err := runLine(ctx, t, "billing invoice resolve ORDER_ID --charged ch_typo --expect-key KEY --by alice",
		placeholders{"ORDER_ID": "ord-held-typo", "KEY": keys["ord-held-typo"].String()}); err != nil {
		t.Fatal(err)
	}
	// Charged at the stub, its reply lost: pending; hours later, its key
	// past half of BILLING_GATEWAY_KEY_TTL, held; the stub then forgets the
	// key (a request under it now would charge again), but keeps the
	// attempt.
	evt, err := billEvent(ctx, t, pool, base, "ord-forgotten")
	if order.Classify(err) != order.ClassTransient {
		t.Fatalf("Bill(ord-forgotten) = %v, want a transient failure (its reply lost)", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET key_sent_at = now() - interval '13 hours', attempt_until = NULL, written_xact = pg_current_xact_id()
		WHERE order_id = 'ord-forgotten'`); err != nil {
		t.Fatal(err)
	}
	if held, err := postgres.NewStore(pool).HoldStale(ctx, order.NewAttemptTerms(time.Second, 24*time.Hour)); err != nil || !slices.Equal(held, []string{"ord-forgotten"}) {
		t.Fatalf("HoldStale = %v, %v; want ord-forgotten held", held, err)
	}
	stub.Forget(evt.EventID.String())
	calls := len(stub.Calls())

	// Without --resolve-held: the planted discrepancies, the money under
	// the held keys, and what the records say of each held invoice.
	out, err := reconcileRun(ctx, t, "--since", "1h")
	want := []string{"double_charge ord-double", "double_charge ord-old-double",
		"money_without_charged_invoice ord-forgotten", "money_without_charged_invoice ord-held-amount",
		"money_without_charged_invoice ord-held-charged", "money_without_charged_invoice ord-uninvoiced",
		"charged_invoice_without_money ord-held-typo"}
	if got := found(out); !slices.Equal(got, want) || !errors.Is(err, errReported) {
		t.Errorf("reconcile found %q, %v; want %q and exit 1", got, err, want)
	}
	if !strings.HasSuffix(out, "reconciled 12 orders: 7 discrepancies\n") {
		t.Errorf("summary: want the last line \"reconciled 12 orders: 7 discrepancies\":\n%s", out)
	}
	for id, want := range map[string]string{"ord-held-charged": "would be settled charged", "ord-held-declined": "would be settled declined",
		"ord-held-amount": "would be settled charged", "ord-forgotten": "would be settled charged", "ord-held-nothing": "left held: no attempt recorded under its key"} {
		if l := heldLine(out, id); !strings.Contains(l, want) {
			t.Errorf("held line of %s: %q, want %q", id, l, want)
		}
	}

	// With --resolve-held: settled as the records decide, and the rest
	// held; the discrepancies the settlements removed are gone, and one
	// came to light: the charge of another amount.
	out, err = reconcileRun(ctx, t, "--since", "1h", "--resolve-held", "--by", "reconcile-cronjob")
	want = []string{"double_charge ord-double", "double_charge ord-old-double", "money_without_charged_invoice ord-uninvoiced",
		"charged_invoice_without_money ord-held-typo", "amount_mismatch ord-held-amount"}
	if got := found(out); !slices.Equal(got, want) || !errors.Is(err, errReported) {
		t.Errorf("reconcile --resolve-held found %q, %v; want %q and exit 1", got, err, want)
	}
	if !strings.HasSuffix(out, "reconciled 12 orders: 5 discrepancies\n") {
		t.Errorf("summary: want \"reconciled 12 orders: 5 discrepancies\":\n%s", out)
	}
	store := postgres.NewStore(pool)
	for id, want := range map[string]struct {
		status order.InvoiceStatus
		charge string
	}{
		"ord-held-charged": {order.StatusCharged, "ch_held"}, "ord-held-declined": {order.StatusDeclined, ""},
		"ord-held-amount": {order.StatusCharged, "ch_amount"}, "ord-held-nothing": {order.StatusHeld, ""},
		"ord-forgotten": {order.StatusCharged, stub.ChargesForOrder("ord-forgotten")[0].ID},
	} {
		d, err := store.ShowInvoice(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != want.status || d.ChargeID != want.charge {
			t.Errorf("%s: %s %q, want %s %q", id, d.Status, d.ChargeID, want.status, want.charge)
		}
		settled := want.status != order.StatusHeld
		if settled && (len(d.Decisions) != 1 || d.Decisions[0].Command != order.CommandReconcileResolveHeld || d.Decisions[0].By != "reconcile-cronjob" ||
			d.Decisions[0].Key != d.EventID || !strings.Contains(d.Decisions[0].Note, "under its key")) {
			t.Errorf("%s: decisions %+v, want one of reconcile resolve-held by reconcile-cronjob on its key, saying why", id, d.Decisions)
		}
		var events int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoice_outbox WHERE order_id = $1 AND status = $2`, id, string(want.status)).Scan(&events); err != nil ||
			(settled && events != 1) {
			t.Errorf("%s: %d invoice events of its settlement waiting, %v; want 1", id, events, err)
		}
		if !settled && len(d.Decisions) != 0 {
			t.Errorf("%s: decisions %+v on an invoice left held", id, d.Decisions)
		}
	}
	if l := heldLine(out, "ord-held-nothing"); !strings.Contains(l, "left held: no attempt recorded under its key") {
		t.Errorf("held line of ord-held-nothing: %q, want it left held, saying nothing is recorded under its key", l)
	}
	// Reconciling reads; it never charges.
	for _, c := range stub.Calls()[calls:] {
		if c.Route != "GET "+gatewaystub.Path {
			t.Errorf("reconcile made a %s call", c.Route)
		}
	}

	// Again, as JSON: nothing more to settle, the same discrepancies.
	out, err = reconcileRun(ctx, t, "--since", "1h", "--resolve-held", "--by", "reconcile-cronjob", "--json")
	var j reconciliation.JSON
	if jerr := json.Unmarshal([]byte(out), &j); jerr != nil || !errors.Is(err, errReported) {
		t.Fatalf("--json: %v, %v:\n%s", jerr, err, out)
	}
	if j.Orders != 12 || j.Total != 5 || j.Counts["double_charge"] != 2 || len(j.Discrepancies) != 5 || len(j.Held) != 1 || j.Held[0].Settled {
		t.Errorf("--json = %+v; want 12 orders, 5 discrepancies (2 double charges), one held invoice left", j)
	}

	// Each run is kept: the last, with what it found and settled.
	last, err := store.LastReconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last.Orders != 12 || last.Total() != 5 || last.HeldSettled != 0 || last.HeldLeft != 1 || last.Discrepancies[order.DiscrepancyDoubleCharge] != 2 {
		t.Errorf("last run kept = %+v; want 12 orders, 5 discrepancies, 1 held left", last)
	}
	var runs, settled int
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(held_settled) FROM reconcile_run WHERE ran_by = 'reconcile-cronjob'`).Scan(&runs, &settled); err != nil ||
		runs != 2 || settled != 4 {
		t.Errorf("runs by reconcile-cronjob = %d settling %d, %v; want 2 runs, 4 settled", runs, settled, err)
	}

	// A period with nothing in it: exit 0.
	out, err = reconcileRun(ctx, t, "--day", now.UTC().AddDate(0, 0, -5).Format(time.DateOnly))
	if err != nil || !strings.HasSuffix(out, "reconciled 0 orders: 0 discrepancies\n") {
		t.Errorf("an empty day: %v:\n%s\nwant exit 0, reconciled 0 orders", err, out)
	}
}

// TestReconcileStripeSearchLag: with Stripe, whose search of one order's
// PaymentIntents lags (here 30 minutes), reconcile lists the last hour
// rather than trust the search with it: a second charge made minutes ago
// of an order of a period hours back, and the charge that settles a held
// invoice, both still missing from the search, are found. PaymentIntents
// without an order are counted, not reconciled.
func TestReconcileStripeSearchLag(t *testing.T) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	stub := gatewaystub.New(gatewaystub.Options{SearchLag: 30 * time.Minute, PageSize: 2})
	base := stub.StartTest(t)
	unsetenv(t, "BILLING_PAYMENT_BASE_URL")
	t.Setenv("BILLING_PAYMENT_PROVIDER", "stripe")
	t.Setenv("BILLING_STRIPE_API_KEY", gatewaystub.DefaultStripeKey)
	t.Setenv("BILLING_STRIPE_API_BASE", base)
	now := time.Now()
	then := now.Add(-150 * time.Minute)
	keys := map[string]uuid.UUID{"ord-s-ok": newKey(t), "ord-s-double": newKey(t), "ord-s-held": newKey(t)}
	settledInvoice(ctx, t, pool, "ord-s-ok", keys["ord-s-ok"], order.StatusCharged, "pi_ok", then)
	plant(stub, "ord-s-ok", keys["ord-s-ok"], "succeeded", then, "pi_ok", 0)
	settledInvoice(ctx, t, pool, "ord-s-double", keys["ord-s-double"], order.StatusCharged, "pi_first", then)
	plant(stub, "ord-s-double", keys["ord-s-double"], "succeeded", then, "pi_first", 0)
	plant(stub, "ord-s-double", newKey(t), "succeeded", now.Add(-10*time.Minute), "pi_again", 0)
	settledInvoice(ctx, t, pool, "ord-s-held", keys["ord-s-held"], order.StatusHeld, "", then)
	plant(stub, "ord-s-held", keys["ord-s-held"], "succeeded", now.Add(-5*time.Minute), "pi_held", 0)
	plant(stub, "", newKey(t), "succeeded", then, "pi_not_billings", 0)

	from, to := now.Add(-3*time.Hour).UTC().Format(time.RFC3339), now.Add(-2*time.Hour).UTC().Format(time.RFC3339)
	out, err := reconcileRun(ctx, t, "--from", from, "--to", to, "--resolve-held", "--by", "alice")
	if got, want := found(out), []string{"double_charge ord-s-double"}; !slices.Equal(got, want) || !errors.Is(err, errReported) {
		t.Errorf("reconcile found %q, %v; want %q and exit 1", got, err, want)
	}
	if !strings.HasSuffix(out, "reconciled 3 orders: 1 discrepancies\n") || !strings.Contains(out, "(1 not billing's)") {
		t.Errorf("want 3 orders, 1 discrepancy, 1 PaymentIntent not billing's:\n%s", out)
	}
	if l := heldLine(out, "ord-s-held"); !strings.Contains(l, "settled charged, charge pi_held") {
		t.Errorf("held line of ord-s-held: %q, want it settled charged with pi_held", l)
	}
}

// reconcileRunbook: BillingReconcileDiscrepancies. Yesterday the stub
// charged an order twice under two keys, and charged a held invoice's key
// (billing never heard the answer); the person reconciles the day, shows
// the order named, and settles what the records decide: the double charge
// remains, for a refund.
func reconcileRunbook(t *testing.T, lines []string) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	stub := gatewaystub.New(gatewaystub.Options{})
	t.Setenv("BILLING_PAYMENT_BASE_URL", stub.StartTest(t))
	yesterday := time.Now().UTC().Truncate(24 * time.Hour).Add(-12 * time.Hour)
	twice, held := newKey(t), newKey(t)
	settledInvoice(ctx, t, pool, "ord-twice", twice, order.StatusCharged, "ch_first", yesterday)
	plant(stub, "ord-twice", twice, gatewaystub.AttemptSucceeded, yesterday, "ch_first", 0)
	plant(stub, "ord-twice", newKey(t), gatewaystub.AttemptSucceeded, yesterday.Add(time.Minute), "ch_second", 0)
	settledInvoice(ctx, t, pool, "ord-held", held, order.StatusHeld, "", yesterday)
	plant(stub, "ord-held", held, gatewaystub.AttemptSucceeded, yesterday, "ch_held", 0)
	p := placeholders{"DAY": yesterday.Format(time.DateOnly), "ORDER_ID": "ord-twice", "NAME": "alice"}
	for _, l := range lines {
		out, err := runLine(ctx, t, l, p)
		switch {
		case strings.Contains(l, " reconcile ") && strings.Contains(l, "--resolve-held"):
			if got := found(out); !slices.Equal(got, []string{"double_charge ord-twice"}) || !errors.Is(err, errReported) {
				t.Errorf("%s: found %q, %v; want the double charge alone, exit 1", l, got, err)
			}
			if !strings.Contains(heldLine(out, "ord-held"), "settled charged, charge ch_held") {
				t.Errorf("%s: want ord-held settled charged with ch_held:\n%s", l, out)
			}
		case strings.Contains(l, " reconcile "):
			want := []string{"double_charge ord-twice", "money_without_charged_invoice ord-held"}
			if got := found(out); !slices.Equal(got, want) || !errors.Is(err, errReported) {
				t.Errorf("%s: found %q, %v; want %q, exit 1", l, got, err, want)
			}
		case strings.Contains(l, " invoice show "):
			if err != nil || !strings.Contains(out, twice.String()) || !strings.Contains(out, "ch_first") {
				t.Errorf("%s: %v; want the invoice's key and charge:\n%s", l, err, out)
			}
		default:
			t.Errorf("%s: a line this scenario does not know", l)
		}
	}
}

// TestReconcileOnStripeMock: the listing of a reconcile with Stripe, sent
// to stripe-mock (Stripe's own server of its API, which validates every
// request): its one fixture PaymentIntent names no order, so it is
// counted as not billing's, and the run is kept for the provider stripe.
func TestReconcileOnStripeMock(t *testing.T) {
	ctx := migrateCtx(t)
	pool := runbookDB(t)
	sm := stripemock.StartTest(t)
	unsetenv(t, "BILLING_PAYMENT_BASE_URL")
	t.Setenv("BILLING_PAYMENT_PROVIDER", "stripe")
	t.Setenv("BILLING_STRIPE_API_KEY", stripemock.APIKey)
	t.Setenv("BILLING_STRIPE_API_BASE", sm.URL)
	out, err := reconcileRun(ctx, t, "--since", "24h")
	if err != nil || !strings.Contains(out, "provider stripe: 0 invoices, 0 records listed (1 not billing's) in 1 pages") ||
		!strings.HasSuffix(out, "reconciled 0 orders: 0 discrepancies\n") {
		t.Errorf("reconcile on stripe-mock: %v:\n%s\nwant its PaymentIntent counted as not billing's, 0 orders, exit 0", err, out)
	}
	var provider string
	if err := pool.QueryRow(ctx, `SELECT provider FROM reconcile_run`).Scan(&provider); err != nil || provider != "stripe" {
		t.Errorf("run kept with provider %q, %v; want stripe", provider, err)
	}
}

// TestReconcileRefusesBadArguments: the period, --by, and stray words,
// each by its rule, before anything is read.
func TestReconcileRefusesBadArguments(t *testing.T) {
	setValidEnv(t)
	for args, want := range map[string]string{
		"--resolve-held":              "--by NAME: required",
		"--since 1s":                  "want 1m to",
		"--day tomorrow":              "not a date",
		"--since 1h --day 2026-12-01": "give one of",
		"--by \x1b[2J":                "not printable",
		"now":                         "unexpected argument",
	} {
		_, err := reconcileRun(context.Background(), t, strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("reconcile %q: %v, want %q", args, err, want)
		}
	}
}
