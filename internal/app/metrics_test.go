package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/pgtest"
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
		"process_resident_memory_bytes",
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
