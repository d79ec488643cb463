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

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// Every CONTRACT §8 name is on the first scrape, before anything was
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
	} {
		if !strings.Contains(text, "\n"+want+"\n") {
			t.Errorf("first scrape lacks %q:\n%s", want, grepLines(text, strings.Fields(want)[0]))
		}
	}
	if !strings.Contains(text, `billing_build_info{goversion="go1.`) || !strings.Contains(text, `revision="`) {
		t.Errorf("billing_build_info without its labels:\n%s", grepLines(text, "billing_build_info"))
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
