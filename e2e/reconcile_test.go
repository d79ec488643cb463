package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/poll"
)

// runExit runs the binary with args to its end and returns its output and
// exit status.
func (e *env) runExit(args ...string) (string, int) {
	e.t.Helper()
	p := e.start(args...)
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		switch {
		case err == nil:
			return p.out.String(), 0
		case errors.As(err, &exit):
			return p.out.String(), exit.ExitCode()
		}
		e.t.Fatalf("billing %v: %v", args, err)
	case <-time.After(60 * time.Second):
		e.t.Fatalf("billing %v did not finish", args)
	}
	return "", -1
}

// reconcileReport is what this test reads of `billing reconcile --json`
// (internal/reconcile.JSON, as a client outside the service reads it).
type reconcileReport struct {
	Orders        int `json:"orders"`
	Discrepancies []struct {
		Kind    string `json:"kind"`
		OrderID string `json:"order_id"`
	} `json:"discrepancies"`
	Held []struct {
		OrderID string `json:"order_id"`
		Settled bool   `json:"settled"`
	} `json:"held"`
}

// reconcileJSON runs `billing reconcile --json args…` and returns its
// report and exit status.
func (e *env) reconcileJSON(args ...string) (reconcileReport, int) {
	e.t.Helper()
	out, code := e.runExit(append([]string{"reconcile", "--json"}, args...)...)
	var j reconcileReport
	// The JSON object is on stdout; the log line after it on stderr, which
	// the process's output interleaves: the object is the text up to the
	// first line that starts a log record.
	text, _, _ := strings.Cut(out, "\n{\"time\"")
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		e.t.Fatalf("billing reconcile --json %v: exit %d, %v:\n%s", args, code, err, out)
	}
	return j, code
}

// found is "kind order" for each discrepancy of j.
func found(j reconcileReport) []string {
	var got []string
	for _, d := range j.Discrepancies {
		got = append(got, d.Kind+" "+d.OrderID)
	}
	return got
}

// TestReconcileAgainstTheBinary: the built binary bills orders from a real
// Kafka broker into a real Postgres against the stub gateway, which then
// holds what `billing reconcile` must find: one order charged a second time
// under another key (planted), money for an order billing never received
// (planted), and held invoices: two a 422 held without executing anything
// (the stub then records a decline under one of their keys, nothing under
// the other), and one whose charge executed while every reply to it was
// lost, held once its key passed half of BILLING_GATEWAY_KEY_TTL, and whose key the stub then forgot (a
// request under it now would charge again). reconcile reports exactly the
// planted discrepancies and the money under the held key, and exits 1;
// --resolve-held settles the two held invoices the records decide
// (charged with the forgotten key's charge, declined) and leaves the one
// without records held; the running service exports the run's result.
func TestReconcileAgainstTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		switch {
		case c.Route != "POST "+gatewaystub.Path: // charges only, never the lookups
		case strings.HasPrefix(c.OrderID, "ord-held-"):
			return gatewaystub.Fault{Status: http.StatusUnprocessableEntity}
		case c.OrderID == "ord-forgot":
			// Executed (the first time: a charge; then replays of it), and
			// every reply lost.
			return gatewaystub.Fault{ResetAfterCharge: true}
		}
		return gatewaystub.Fault{}
	})
	// The completer passes twice a second: the hold and the gauges come soon.
	e.extra = append(e.extra, "BILLING_PENDING_RESUME_AFTER=2s")
	p := e.start("run")
	metricsURL := "http://" + httpAddr(t, p) + "/metrics"

	ids := []string{"ord-ok-1", "ord-ok-2", "ord-ok-3", "ord-double", "ord-held-declined", "ord-held-none", "ord-forgot"}
	var msgs []kafkago.Message
	for _, id := range ids {
		msgs = append(msgs, orderMessage(t, id))
	}
	e.produce(msgs)
	poll.Until(t, "the orders billed, the 422s held, ord-forgot pending", 60*time.Second, func() bool {
		invs := e.invoices()
		for _, id := range ids {
			want := order.StatusCharged
			switch {
			case strings.HasPrefix(id, "ord-held-"):
				want = order.StatusHeld
			case id == "ord-forgot":
				want = order.StatusPending
			}
			if invs[id].Status != want {
				return false
			}
		}
		return len(e.gw.ChargesForOrder("ord-forgot")) == 1
	})

	// Hours pass for ord-forgot: its key is past half of the key's
	// lifetime, and the completer holds it; then the stub forgets the key.
	pool, err := pgxpool.New(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `UPDATE invoice SET key_sent_at = now() - interval '13 hours', written_xact = pg_current_xact_id()
		WHERE order_id = 'ord-forgot'`); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "ord-forgot held by the completer", 60*time.Second, func() bool { return e.invoices()["ord-forgot"].Status == order.StatusHeld })
	invs := e.invoices()
	forgot := e.gw.ChargesForOrder("ord-forgot")[0]
	e.gw.Forget(invs["ord-forgot"].EventID.String())

	// What the stub's records hold besides billing's own charges.
	double := e.gw.Plant(gatewaystub.Attempt{Key: "0190f8a4-6c1e-7b3a-9d2f-000000000001", OrderID: "ord-double", CustomerID: "cus-ord-double",
		Amount: 4200, Currency: "EUR", Status: gatewaystub.AttemptSucceeded})
	e.gw.Plant(gatewaystub.Attempt{Key: "0190f8a4-6c1e-7b3a-9d2f-000000000002", OrderID: "ord-never-sent", CustomerID: "cus-x",
		Amount: 990, Currency: "EUR", Status: gatewaystub.AttemptSucceeded})
	e.gw.Plant(gatewaystub.Attempt{Key: invs["ord-held-declined"].EventID.String(), OrderID: "ord-held-declined", CustomerID: "cus-ord-held-declined",
		Amount: 4200, Currency: "EUR", Status: gatewaystub.AttemptDeclined})
	calls := len(e.gw.Calls())

	out, code := e.runExit("reconcile", "--since", "1h")
	if !strings.Contains(out, "reconciled 8 orders: 3 discrepancies\n") || code != 1 || !strings.Contains(out, double.ID) {
		t.Errorf("reconcile: exit %d; want exit 1, \"reconciled 8 orders: 3 discrepancies\", the planted charge %s named:\n%s", code, double.ID, out)
	}
	j, code := e.reconcileJSON("--since", "1h")
	want := []string{"double_charge ord-double", "money_without_charged_invoice ord-forgot", "money_without_charged_invoice ord-never-sent"}
	if got := found(j); !slices.Equal(got, want) || code != 1 || j.Orders != 8 {
		t.Errorf("reconcile --json: exit %d, %d orders, found %q; want exit 1, 8 orders and %q", code, j.Orders, got, want)
	}

	j, code = e.reconcileJSON("--since", "1h", "--resolve-held", "--by", "e2e-oncall")
	want = []string{"double_charge ord-double", "money_without_charged_invoice ord-never-sent"}
	if got := found(j); !slices.Equal(got, want) || code != 1 || j.Orders != 8 || len(j.Held) != 3 {
		t.Errorf("reconcile --resolve-held: exit %d, %d orders, %d held, found %q; want exit 1, 8 orders, 3 held and %q", code, j.Orders, len(j.Held), got, want)
	}
	invs = e.invoices()
	for id, want := range map[string]struct {
		status order.InvoiceStatus
		charge string
	}{
		"ord-forgot": {order.StatusCharged, forgot.ID}, "ord-held-declined": {order.StatusDeclined, ""}, "ord-held-none": {order.StatusHeld, ""},
	} {
		if inv := invs[id]; inv.Status != want.status || inv.ChargeID != want.charge {
			t.Errorf("%s: %s %q, want %s %q", id, inv.Status, inv.ChargeID, want.status, want.charge)
		}
	}
	for _, c := range e.gw.Calls()[calls:] {
		if c.Route == "POST "+gatewaystub.Path {
			t.Errorf("a charge was sent for %s while reconciling", c.OrderID)
		}
	}

	// The pods export the last run: what the CronJob found, on the
	// dashboards and in the alerts.
	poll.Until(t, "the service to export the last run", 30*time.Second, func() bool {
		m := scrape(metricsURL)
		return m[`billing_reconcile_discrepancies{kind="double_charge"}`] == 1 &&
			m[`billing_reconcile_discrepancies{kind="money_without_charged_invoice"}`] == 1 &&
			m[`billing_reconcile_discrepancies{kind="amount_mismatch"}`] == 0 &&
			m["billing_reconcile_last_run_timestamp_seconds"] > float64(time.Now().Add(-time.Minute).Unix())
	})
	e.stop(p)
}
