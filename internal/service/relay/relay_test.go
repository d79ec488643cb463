package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/poll"
)

// The outbox relay's tests run over the in-memory store, which keeps
// order.Outbox's contract as the Postgres store does
// (ledgertest.RunOutbox): the relay's own rules need no database. They
// drive the loop's turns (step) one by one, without its goroutine, except
// for the one test of Start and Stop.

// chargingGateway charges every request, safe for concurrent use.
type chargingGateway struct{ n atomic.Int64 }

func (g *chargingGateway) Charge(context.Context, order.ChargeRequest) (order.ChargeResult, error) {
	return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: fmt.Sprintf("ch-%d", g.n.Add(1))}, nil
}

// charge bills orders from, from+1, … from+n-1 into mem, each charged, so
// that each leaves one event in the outbox.
func charge(t *testing.T, mem *ledgertest.Mem, from, n int) {
	t.Helper()
	svc := order.NewBillingService(mem, &chargingGateway{}, "billing")
	for i := from; i < from+n; i++ {
		evt, err := order.NewOrderConfirmedEvent(order.Order{ID: fmt.Sprintf("ord-%d", i), CustomerID: "cus-1",
			TotalAmount: 12990, Currency: "EUR", ConfirmedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := svc.Bill(t.Context(), evt); err != nil || out != order.OutcomeCharged {
			t.Fatalf("Bill(%s) = %s, %v; want charged", evt.OrderID, out, err)
		}
	}
}

// newMetrics returns the metrics on a registry of the test's own.
func newMetrics() *metrics.Metrics { return metrics.New(prometheus.NewRegistry(), false) }

// recordingPublisher keeps what it is given; while fails > 0 it refuses
// (and counts down), and while fail is set it refuses for ever.
type recordingPublisher struct {
	mu     sync.Mutex
	events []order.InvoiceEvent
	fails  int
	fail   error
}

func (p *recordingPublisher) Publish(_ context.Context, events []order.InvoiceEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	if p.fails > 0 {
		p.fails--
		return errors.New("kafka: leader not available")
	}
	p.events = append(p.events, events...)
	return nil
}

func (p *recordingPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.events)
}

// TestRelayTurns: the loop's turns back off from Idle, doubling up to
// MaxBackoff, while the publisher fails; then a full batch is followed by
// the next pass at once, and a short one by Idle. The stats are read on
// the first turn and every StatsEvery after, whether or not the passes
// publish; the published events are counted.
func TestRelayTurns(t *testing.T) {
	t.Parallel()
	mem := ledgertest.NewMem()
	charge(t, mem, 0, 25)
	p := &recordingPublisher{fails: 3}
	m := newMetrics()
	r := New(mem, p, Options{Batch: 10, Idle: time.Millisecond, MaxBackoff: 4 * time.Millisecond, StatsEvery: time.Hour, Metrics: m.Relay()})
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }

	var s schedule
	for i, want := range []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond, 0, 0, time.Millisecond} {
		wait, again := r.step(t.Context(), &s)
		if !again || wait != want {
			t.Fatalf("turn %d = %v, %v; want %v, true", i+1, wait, again, want)
		}
		if i == 0 {
			if got := testutil.ToFloat64(m.OutboxPending); got != 25 {
				t.Errorf("billing_outbox_pending after the first turn = %v, want 25", got)
			}
			charge(t, mem, 25, 1) // counted only when the stats are next due
		}
	}
	if got := p.count(); got != 26 {
		t.Errorf("published %d events, want 26", got)
	}
	if got := testutil.ToFloat64(m.OutboxPending); got != 25 {
		t.Errorf("billing_outbox_pending = %v before StatsEvery passed, want the first count, 25", got)
	}
	now = now.Add(time.Hour)
	if _, again := r.step(t.Context(), &s); !again {
		t.Fatal("turn after an hour: the loop ended")
	}
	if got := testutil.ToFloat64(m.OutboxPending); got != 0 {
		t.Errorf("billing_outbox_pending an hour later = %v, want 0", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, again := r.step(ctx, &s); again {
		t.Error("turn with its context ended: the loop goes on")
	}
}

// TestRelayStartStop: the loop publishes everything through failed passes,
// and Stop ends it.
func TestRelayStartStop(t *testing.T) {
	t.Parallel()
	mem := ledgertest.NewMem()
	charge(t, mem, 0, 25)
	p := &recordingPublisher{fails: 3}
	r := New(mem, p, Options{Batch: 10, Idle: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the relay publishes all 25 events", 20*time.Second, func() bool { return p.count() == 25 })
	r.Stop()
	if st, err := mem.OutboxStats(t.Context()); err != nil || st.Pending != 0 {
		t.Errorf("OutboxStats() after the relay = %+v, %v; want nothing waiting", st, err)
	}
}

// TestOutboxGrowsWhilePublishingFails: while the publisher fails, billing
// goes on, the outbox keeps every event and its stats say so; once it
// succeeds, everything leaves.
func TestOutboxGrowsWhilePublishingFails(t *testing.T) {
	t.Parallel()
	mem := ledgertest.NewMem()
	refusing := &recordingPublisher{fail: errors.New("kafka: not leader")}
	relay := New(mem, refusing, Options{})
	for i := range 10 {
		charge(t, mem, i, 1)
		if _, err := relay.Pass(t.Context()); err == nil {
			t.Fatal("Pass() with the publisher refusing: no error")
		}
	}
	st, err := mem.OutboxStats(t.Context())
	if err != nil || st.Pending != 10 || st.Oldest <= 0 {
		t.Errorf("OutboxStats() = %+v, %v, want 10 waiting, the oldest aged", st, err)
	}
	ok := &recordingPublisher{}
	relay = New(mem, ok, Options{Batch: 4})
	for _, want := range []int{4, 4, 2} {
		if n, err := relay.Pass(t.Context()); err != nil || n != want {
			t.Fatalf("Pass() = %d, %v; want %d", n, err, want)
		}
	}
	if n := ok.count(); n != 10 {
		t.Errorf("published %d once the publisher took them, want 10", n)
	}
}

// failingStats is the store whose outbox statistics fail.
type failingStats struct{ *ledgertest.Mem }

func (failingStats) OutboxStats(context.Context) (order.OutboxStats, error) {
	return order.OutboxStats{}, errors.New("outbox stats: connection reset")
}

// TestRelayPassesCompleteOnlyWithTheirStats: a relay pass completes when it
// published what it found and, when due, read the outbox's stats; passes
// whose stats fail leave billing_background_last_success_timestamp_seconds
// where it was, so the gauges' staleness shows.
func TestRelayPassesCompleteOnlyWithTheirStats(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		outbox func(*ledgertest.Mem) order.Outbox
		want   bool
	}{
		{"stats fail", func(m *ledgertest.Mem) order.Outbox { return failingStats{m} }, false},
		{"stats read", func(m *ledgertest.Mem) order.Outbox { return m }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := ledgertest.NewMem()
			charge(t, mem, 0, 1)
			m := newMetrics()
			relay := New(tt.outbox(mem), &recordingPublisher{}, Options{Idle: time.Millisecond, StatsEvery: time.Nanosecond, Metrics: m.Relay()})
			var s schedule
			for range 3 {
				if _, again := relay.step(t.Context(), &s); !again {
					t.Fatal("the loop ended")
				}
			}
			if got := testutil.ToFloat64(m.BackgroundLastSuccess.WithLabelValues(metrics.ServiceRelay)) > 0; got != tt.want {
				t.Errorf("a pass completed: %v, want %v", got, tt.want)
			}
		})
	}
}
