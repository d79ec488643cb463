package kafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// captureWriter keeps what it is asked to write and acknowledges it.
type captureWriter struct {
	mu   sync.Mutex
	msgs []Record
}

func (w *captureWriter) WriteRecords(_ context.Context, recs ...Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, recs...)
	return nil
}

// A gateway's Retry-After never skips a tier: every configured
// tier gets its attempt, so a 429 asking for 2 minutes goes to tier 1, not
// straight to the tier whose delay covers the hint; tier 1 holds it for its
// own delay, the longest a tier waits (docs/interface.md §5).
func TestRouteHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	w := &captureWriter{}
	routes := Routes{Group: "g", RetryTopics: []string{"t.1", "t.2", "t.3"}, DLQTopic: "dlq",
		Policy: order.NewRetryPolicy(5*time.Second, time.Minute, 10*time.Minute)}
	r := NewRouter(w, routes, metrics.New(prometheus.NewRegistry(), false).Router(), nil, slog.New(slog.DiscardHandler))
	cause := &order.TransientError{Op: "charge", Err: errors.New("429 Too Many Requests"), RetryAfter: 2 * time.Minute}
	before := time.Now()
	outcome, err := r.Route(context.Background(), Record{Topic: "main", Key: []byte("k"), Value: []byte("v")},
		0, routes.Policy.Decide(cause, 0, 0), cause)
	if err != nil || outcome != order.OutcomeRetried {
		t.Fatalf("Route = %q, %v; want retried", outcome, err)
	}
	if len(w.msgs) != 1 {
		t.Fatalf("%d records written, want 1", len(w.msgs))
	}
	got := w.msgs[0]
	if got.Topic != "t.1" {
		t.Errorf("routed to %s, want t.1: a Retry-After skips no tier", got.Topic)
	}
	if a, _ := headerOf(got.Headers, HeaderAttempt); a != "1" {
		t.Errorf("x-attempt %q, want 1 (the tier it is in)", a)
	}
	v, _ := headerOf(got.Headers, HeaderNotBefore)
	nb, perr := time.Parse(time.RFC3339Nano, v)
	if perr != nil || nb.Before(before.Add(5*time.Second)) || nb.After(time.Now().Add(5*time.Second)) {
		t.Errorf("x-not-before %q, want tier 1's delay (5s) after routing", v)
	}
}
