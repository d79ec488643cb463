package kafka

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// TestOutageOutlivedByAnAttemptDoesNotPauseAgain (docs/interface.md §4, issue 30
// point 7): an event whose attempt was in flight when an outage began, and
// fails with it only after the outage has ended (a probe went through and
// consumption resumed), does not pause consumption again: its failure
// belongs to the outage that is over. It tries again at once, and is billed.
func TestOutageOutlivedByAnAttemptDoesNotPauseAgain(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	entered, release := make(chan struct{}), make(chan struct{})
	down := &order.OutageError{Dependency: order.DependencyGateway, Err: errors.New("connection refused")}
	h := &scriptedHandler{fn: func(v string, call int) (order.Outcome, error) {
		switch {
		case v == "slow" && call == 1:
			close(entered)
			<-release // in flight while the outage begins and ends
			return "", down
		case v == "fast" && call == 1:
			return "", down // the outage
		}
		return order.OutcomeCharged, nil // the probe, and every try after
	}}
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	pause := health.NewPause(&metrics.Outage{Paused: r.m.ConsumerPaused}, log)
	reader := newTestSource(t, kafkatest.FastReaderConfig(r.brokers, r.group, r.topic))
	fw := &failingWriter{w: kafkatest.NewMessageWriter(t, r.brokers, "")}
	c := NewConsumer(reader, h, NewRouter(NewClientWriter(fw), r.routes, r.m.Router(), pause, log), pause, r.m.Consumer(), log,
		Options{MaxInFlight: 4, CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second, RevokeTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() { close(release) })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = reader.Close()
	})

	r.send(t, "slow")
	<-entered
	r.send(t, "fast")
	pauses := func() int { return strings.Count(logs.String(), "consumption paused") }
	poll.Until(t, "the outage paused and its probe resumed", 15*time.Second, func() bool {
		return pauses() == 1 && strings.Contains(logs.String(), "consumption resumed")
	})
	once.Do(func() { close(release) })
	poll.Until(t, "both billed", 15*time.Second, func() bool {
		return testutil.ToFloat64(r.m.Events.WithLabelValues("charged")) == 2
	})
	if n := pauses(); n != 1 {
		t.Errorf("%d pauses, want 1: the slow attempt's failure belonged to the outage that had ended", n)
	}
	if n := h.count("slow"); n != 2 {
		t.Errorf("slow tried %d times, want 2", n)
	}
	if got := testutil.ToFloat64(r.m.ConsumerPaused); got != 0 {
		t.Errorf("paused = %v at the end", got)
	}
}
