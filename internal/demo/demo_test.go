package demo

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/pgcluster"
)

// The demo is the embedded default: it must run with nothing started and
// tell the truth about what happened to each kind of record.
func TestDemo(t *testing.T) {
	// It starts its own Postgres, as `make demo` does.
	needs.External(t, "a Postgres server")
	if _, err := pgcluster.FindBinDir(); errors.Is(err, pgcluster.ErrUnavailable) {
		needs.Missing(t, err)
	}
	var out strings.Builder
	o := Options{Orders: 40, Resends: 10, SecondEvents: 5, Declines: 3, Flaky: 2, Bad: 6,
		LogFile: filepath.Join(t.TempDir(), "demo.log"), Seed: 42}
	rep, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	want := map[string]int{"charged": 40 - 3, "declined": 3, "duplicate": 10, "duplicate_order": 5, "retried": 2, "dead_lettered": 6}
	for k, v := range want {
		if rep.Outcomes[k] != v {
			t.Errorf("outcome %s = %d, want %d", k, rep.Outcomes[k], v)
		}
	}
	if rep.Orders != 40 || rep.Invoices[order.StatusCharged] != 37 || rep.Invoices[order.StatusDeclined] != 3 {
		t.Errorf("invoices: %d orders, %v", rep.Orders, rep.Invoices)
	}
	if rep.Charges != 37 || rep.ChargedOrders != 37 || len(rep.DoubleCharged) != 0 {
		t.Errorf("charges %d for %d orders, double %v", rep.Charges, rep.ChargedOrders, rep.DoubleCharged)
	}
	if len(rep.DLQ) != 6 || rep.Gateway503 != 2 {
		t.Errorf("DLQ %d records, %d gateway 503s", len(rep.DLQ), rep.Gateway503)
	}
	// It ends with the reconciliation's summary: every order, nothing
	// differing between the invoices and the gateway's records.
	if !strings.HasSuffix(out.String(), "\nreconciled 40 orders: 0 discrepancies\n") || rep.Reconciled.Orders != 40 {
		t.Errorf("the demo does not end with \"reconciled 40 orders: 0 discrepancies\" (%+v):\n%s", rep.Reconciled, out.String())
	}
	for _, s := range []string{"exactly once: OK", "dead-letter topic", "duplicate_order"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, out.String())
		}
	}
}
