package kafka

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// captureWriter keeps what it is asked to write and acknowledges it.
type captureWriter struct {
	mu   sync.Mutex
	msgs []kafkago.Message
}

func (w *captureWriter) WriteMessages(_ context.Context, msgs ...kafkago.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msgs...)
	return nil
}

// A gateway that answers Retry-After must not see the event again sooner:
// the policy sends it to the first tier whose delay is at least that long,
// so that the tier's own clamp of x-not-before (CONTRACT §5) still holds,
// and the router writes it there with that tier's attempt and not-before.
func TestRouteHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	w := &captureWriter{}
	routes := Routes{Group: "g", RetryTopics: []string{"t.1", "t.2", "t.3"}, DLQTopic: "dlq",
		Policy: order.NewRetryPolicy(5*time.Second, time.Minute, 10*time.Minute)}
	r := NewRouter(w, routes, metrics.New(prometheus.NewRegistry(), false), nil, slog.New(slog.DiscardHandler))
	cause := &order.TransientError{Op: "charge", Err: errors.New("429 Too Many Requests"), RetryAfter: 2 * time.Minute}
	before := time.Now()
	outcome, err := r.Route(context.Background(), kafkago.Message{Topic: "main", Key: []byte("k"), Value: []byte("v")},
		0, routes.Policy.Decide(cause, 0, 0), cause)
	if err != nil || outcome != order.OutcomeRetried {
		t.Fatalf("Route = %q, %v; want retried", outcome, err)
	}
	if len(w.msgs) != 1 {
		t.Fatalf("%d records written, want 1", len(w.msgs))
	}
	got := w.msgs[0]
	if got.Topic != "t.3" {
		t.Errorf("routed to %s, want t.3 (the first tier whose delay, 10m, covers Retry-After 2m)", got.Topic)
	}
	if a, _ := headerOf(got.Headers, HeaderAttempt); a != "3" {
		t.Errorf("x-attempt %q, want 3 (the tier it is in)", a)
	}
	v, _ := headerOf(got.Headers, HeaderNotBefore)
	nb, perr := time.Parse(time.RFC3339Nano, v)
	if perr != nil || nb.Before(before.Add(cause.RetryAfter)) {
		t.Errorf("x-not-before %q, want at least Retry-After (2m) after routing", v)
	}
}
