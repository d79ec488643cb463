package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/version"
)

// Every docs/interface.md §8 name is on the first scrape, before anything was
// reached or handled, and the gateway's usual codes start at 0, so that a
// restarted pod that only sees duplicates still has the series.
func TestFirstScrapeHasEveryName(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	cfg := testConfig([]string{"127.0.0.1:9"}, dsn, "http://127.0.0.1:9")
	a, err := New(context.Background(), cfg, Tuning{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if a.srv.ReadTimeout <= 0 || a.srv.WriteTimeout <= 0 || a.srv.IdleTimeout <= 0 {
		t.Errorf("metrics server timeouts read %v write %v idle %v: want each set", a.srv.ReadTimeout, a.srv.WriteTimeout, a.srv.IdleTimeout)
	}
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, name := range []string{
		"billing_events_total", "billing_handle_duration_seconds", "billing_payment_requests_total",
		"billing_payment_duration_seconds", "billing_in_flight", "billing_dedup_rows_deleted_total",
		"billing_dedup_partitions", "billing_consumer_paused", "billing_build_info", "go_goroutines",
		"process_resident_memory_bytes", "billing_invoices_pending", "billing_invoice_pending_oldest_seconds",
		"billing_invoices_held", "billing_gateway_key_ttl_seconds", "billing_pending_resume_after_seconds",
		"billing_consumption_paused", "billing_reconcile_discrepancies", "billing_reconcile_last_run_timestamp_seconds",
	} {
		if !strings.Contains(text, "# TYPE "+name+" ") {
			t.Errorf("first scrape lacks %s", name)
		}
	}
	for _, code := range metrics.PaymentCodes {
		if want := `billing_payment_requests_total{code="` + code + `"} 0`; !strings.Contains(text, want) {
			t.Errorf("first scrape lacks %s", want)
		}
	}
	// The alerts on pending invoices are written against the configured
	// durations, so these read the configuration from the first scrape on;
	// held invoices start at 0.
	for _, want := range []string{
		"billing_gateway_key_ttl_seconds 86400", "billing_pending_resume_after_seconds 900", "billing_invoices_held 0",
		`billing_consumption_paused{by="outage"} 0`, `billing_consumption_paused{by="operator"} 0`,
		`billing_consumption_paused{by="release"} 0`,
		// Every background service this process runs, at 0 until its first
		// pass completes.
		`billing_background_last_success_timestamp_seconds{service="completer"} 0`,
		`billing_background_last_success_timestamp_seconds{service="maintainer"} 0`,
		// No reconciliation read yet: every kind at 0, and a last run at 0,
		// which the alert on its age takes for none.
		`billing_reconcile_discrepancies{kind="double_charge"} 0`, `billing_reconcile_discrepancies{kind="money_without_charged_invoice"} 0`,
		`billing_reconcile_discrepancies{kind="charged_invoice_without_money"} 0`, `billing_reconcile_discrepancies{kind="amount_mismatch"} 0`,
		"billing_reconcile_last_run_timestamp_seconds 0",
	} {
		if !strings.Contains(text, "\n"+want+"\n") {
			t.Errorf("first scrape lacks %q:\n%s", want, grepLines(text, strings.Fields(want)[0]))
		}
	}
	// No relay runs without BILLING_PUBLISH_EVENTS: no series that a stale
	// alert would take for a relay that stopped.
	if strings.Contains(text, `service="relay"`) {
		t.Errorf("a relay's freshness exported while publishing is off:\n%s", grepLines(text, "billing_background"))
	}
	if !strings.Contains(text, `billing_build_info{goversion="go1.`) || !strings.Contains(text, `revision="`) {
		t.Errorf("billing_build_info without its labels:\n%s", grepLines(text, "billing_build_info"))
	}
	// Which release runs where (docs/interface.md §10): the release, the schema
	// it needs and the oldest release it runs beside.
	for _, label := range []string{`version="` + version.Release + `"`, `schema="` + postgres.Schema() + `"`, `runs_beside="` + version.RunsBeside + `"`} {
		if !strings.Contains(grepLines(text, "billing_build_info"), label) {
			t.Errorf("billing_build_info lacks %s:\n%s", label, grepLines(text, "billing_build_info"))
		}
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestCommittedOffsetPerPartition: billing_consumer_committed_offset is the
// group's committed offset of each partition, read from the brokers beside
// billing_consumer_lag: the alert on a stuck partition watches it not move
// while that partition's lag stays above zero.
func TestCommittedOffsetPerPartition(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	var msgs []kafkago.Message
	for i := range 7 {
		_, m := event(t, fmt.Sprintf("ord-c%d", i), "cus-1", 100)
		msgs = append(msgs, m)
	}
	h.send(msgs...)
	// Each partition starts at offset 0, so once every record is committed
	// the partitions' committed offsets add up to the records sent.
	var got map[string]float64
	poll.Until(t, "committed offsets adding up to the 7 records", 20*time.Second, func() bool {
		got = h.labelled("billing_consumer_committed_offset", "topic", testTopic)
		sum := 0.0
		for _, v := range got {
			sum += v
		}
		return len(got) == 3 && sum == 7
	})
	lag := h.labelled("billing_consumer_lag", "topic", testTopic)
	for p := range got {
		if _, ok := lag[p]; !ok {
			t.Errorf("partition %s has a committed offset but no billing_consumer_lag", p)
		}
	}
}

// labelled returns the values of the gauge name whose label is value, by
// their partition label.
func (h *harness) labelled(name, label, value string) map[string]float64 {
	h.t.Helper()
	mfs, err := h.app.Metrics.Gathered.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var match bool
			var part string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case label:
					match = l.GetValue() == value
				case "partition":
					part = l.GetValue()
				}
			}
			if match {
				out[part] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestReconcileGaugesFromPostgres: the last `billing reconcile` run kept in
// Postgres is what every pod exports (a CronJob is never scraped), read by
// each pass of the pending completer like the held and pending counts, and
// replaced by the next run's.
func TestReconcileGaugesFromPostgres(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	// A pass every half second (a quarter of BILLING_PENDING_RESUME_AFTER).
	h := newHarness(t, nil, func(c *config.Config) { c.PendingResumeAfter = 2 * time.Second })
	day := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for _, run := range []struct{ double, money int }{{1, 2}, {0, 0}} {
		at, err := h.store.RecordReconcile(ctx, postgres.ReconcileRun{Provider: "generic", Started: time.Now(), By: "cronjob",
			ReconcileResult: order.ReconcileResult{Period: order.Period{From: day, To: day.Add(24 * time.Hour)}, Orders: 10,
				Discrepancies: map[order.DiscrepancyKind]int{order.DiscrepancyDoubleCharge: run.double, order.DiscrepancyMoneyWithoutCharged: run.money}}})
		if err != nil {
			t.Fatal(err)
		}
		want := map[order.DiscrepancyKind]float64{order.DiscrepancyDoubleCharge: float64(run.double),
			order.DiscrepancyMoneyWithoutCharged: float64(run.money), order.DiscrepancyChargedWithoutMoney: 0, order.DiscrepancyAmountMismatch: 0}
		poll.Until(t, fmt.Sprintf("the gauges of the run at %v", at), 20*time.Second, func() bool {
			for k, v := range want {
				if testutil.ToFloat64(h.app.Metrics.ReconcileDiscrepancies.WithLabelValues(string(k))) != v {
					return false
				}
			}
			return testutil.ToFloat64(h.app.Metrics.ReconcileLastRun) == float64(at.UnixMilli())/1e3
		})
	}
}
