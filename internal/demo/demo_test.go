package demo

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/acme/billing/core/order"
)

// The demo is the embedded default: it must run with nothing started and
// tell the truth about what happened to each kind of record.
func TestDemo(t *testing.T) {
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
	for _, s := range []string{"exactly once: OK", "dead-letter topic", "duplicate_order"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, out.String())
		}
	}
}
