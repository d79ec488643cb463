package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
)

// billing_events_total starts with one series at zero for each outcome core
// declares, and no other, so rate() works from the first scrape.
func TestEventsStartAtZeroForEveryCoreOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, false)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "billing_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%v = %v at start, want 0", m.GetLabel(), v)
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					got = append(got, l.GetValue())
				}
			}
		}
	}
	var want []string
	for _, o := range order.Outcomes() {
		want = append(want, string(o))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("outcome labels at start = %q, want %q", got, want)
	}
}
