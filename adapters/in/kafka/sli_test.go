package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// histogramOf reads a histogram's count, sum and the cumulative count of the
// bucket with upper bound le.
func histogramOf(t *testing.T, h prometheus.Histogram, le float64) (count uint64, sum float64, atMost uint64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	for _, b := range m.GetHistogram().GetBucket() {
		if b.GetUpperBound() == le {
			atMost = b.GetCumulativeCount()
		}
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(), atMost
}

// TestEventDelayFromOccurredAt: billing_event_delay_seconds is observed once
// per final event, from the order's occurred_at; a record whose occurred_at
// cannot be read is measured from its Kafka timestamp.
func TestEventDelayFromOccurredAt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) { return order.OutcomeCharged, nil }}
	old := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339Nano)
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	if err := w.WriteMessages(context.Background(),
		kafkago.Message{Key: []byte("a"), Value: []byte(`{"event_id":"x","occurred_at":"` + old + `"}`)},
		kafkago.Message{Key: []byte("b"), Value: []byte(`not json`)},
	); err != nil {
		t.Fatal(err)
	}
	r.run(t, 0, r.topic, r.group, h, kafkatest.NewMessageWriter(t, r.brokers, ""))

	poll.Until(t, "two final events", 15*time.Second, func() bool {
		n, _, _ := histogramOf(t, r.m.EventDelay, 60)
		return n >= 2
	})
	n, sum, within := histogramOf(t, r.m.EventDelay, 60)
	if n != 2 || within != 1 {
		t.Errorf("billing_event_delay_seconds: %d observations, %d within 60 s; want 2, 1 (the 10-minute-old order is late, the unreadable one is measured from its fresh record timestamp)", n, within)
	}
	if sum < (10 * time.Minute).Seconds() {
		t.Errorf("billing_event_delay_seconds sum %.0fs, want at least the 10-minute-old order's age", sum)
	}
}

// TestHandleDurationExcludesNotBefore: a tier record waits for its
// x-not-before before it is handled; that wait is not handle latency (it
// made the dashboard's p99 sit at the top bucket whenever retries flowed).
// The bound is exact, not a timing guess: the handling started after the
// not-before passed, and ended before the test saw it.
func TestHandleDurationExcludesNotBefore(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// A tier honours x-not-before only up to its own delay (docs/interface.md §5):
	// give it a delay longer than this record's wait, so the wait is real.
	r.routes.Policy = fastPolicy(5 * time.Second)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) { return order.OutcomeCharged, nil }}
	notBefore := time.Now().Add(2 * time.Second)
	w := kafkatest.NewWriter(t, r.brokers, "retry.1")
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("k"), Value: []byte("v"),
		Headers: []kafkago.Header{{Key: HeaderNotBefore, Value: []byte(notBefore.UTC().Format(time.RFC3339Nano))}}}); err != nil {
		t.Fatal(err)
	}
	r.run(t, 1, "retry.1", "g.retry.1", h, kafkatest.NewMessageWriter(t, r.brokers, ""))

	var n uint64
	var sum float64
	poll.Until(t, "the tier record handled", 15*time.Second, func() bool {
		n, sum, _ = histogramOf(t, r.m.HandleDuration, 60)
		return n == 1
	})
	if bound := time.Since(notBefore).Seconds(); sum > bound {
		t.Errorf("billing_handle_duration_seconds %.3fs, more than the %.3fs since x-not-before: it includes the wait", sum, bound)
	}
	if v := testGauge(t, r.m.InFlight.WithLabelValues("retry.1")); v != 0 {
		t.Errorf("billing_in_flight{topic=retry.1} = %v after the record, want 0", v)
	}
}

func testGauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestEventDelayOncePerEventThroughTiers: an event that meets a 503 on the
// main topic and is charged on tier 1 is one order with one outcome, so
// billing_event_delay_seconds counts it once, at the charge, from its
// occurred_at (docs/interface.md §8: "never per hop through the tiers"). An event
// that fails on every tier is observed once too, when it is dead-lettered.
func TestEventDelayOncePerEventThroughTiers(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(_ string, call int) (order.Outcome, error) {
		if call == 1 {
			return "", &order.TransientError{Op: "charge", Err: errors.New("503")}
		}
		return order.OutcomeCharged, nil
	}}
	old := time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339Nano)
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	if err := w.WriteMessages(context.Background(),
		kafkago.Message{Key: []byte("a"), Value: []byte(`{"occurred_at":"` + old + `"}`)},
	); err != nil {
		t.Fatal(err)
	}
	routed := kafkatest.NewMessageWriter(t, r.brokers, "")
	stopMain := r.run(t, 0, r.topic, r.group, h, routed)
	stopTier := r.run(t, 1, "retry.1", "g.retry.1", h, routed)
	poll.Until(t, "the event charged on tier 1", 15*time.Second, func() bool {
		return testutil.ToFloat64(r.m.Events.WithLabelValues("charged")) == 1
	})
	// Run returns once in-flight events are final: every observation of
	// both hops is made by then.
	stopTier()
	stopMain()
	if got := testutil.ToFloat64(r.m.Events.WithLabelValues("retried")); got != 1 {
		t.Fatalf("billing_events_total{outcome=retried} = %v, want 1 (the first hop)", got)
	}
	n, sum, _ := histogramOf(t, r.m.EventDelay, 60)
	if n != 1 {
		t.Errorf("billing_event_delay_seconds: %d observations for one event routed once and charged, want 1", n)
	}
	if sum < (10 * time.Minute).Seconds() {
		t.Errorf("billing_event_delay_seconds sum %.0fs, want the 10-minute-old order's age at its charge", sum)
	}
}

// TestEventDelayOnceWhenDeadLetteredAfterTiers: an event that fails on the
// main topic and on the last tier is observed once, when it reaches the DLQ.
func TestEventDelayOnceWhenDeadLetteredAfterTiers(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) {
		return "", &order.TransientError{Op: "charge", Err: errors.New("503")}
	}}
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("a"), Value: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	routed := kafkatest.NewMessageWriter(t, r.brokers, "")
	stopMain := r.run(t, 0, r.topic, r.group, h, routed)
	stopTier := r.run(t, 1, "retry.1", "g.retry.1", h, routed)
	poll.Until(t, "the event dead-lettered after tier 1", 15*time.Second, func() bool {
		return testutil.ToFloat64(r.m.Events.WithLabelValues("dead_lettered")) == 1
	})
	stopTier()
	stopMain()
	if n, _, _ := histogramOf(t, r.m.EventDelay, 60); n != 1 {
		t.Errorf("billing_event_delay_seconds: %d observations for one event routed to tier 1 then dead-lettered, want 1", n)
	}
}

// TestReplayedEventsMeasuredApart: a record `billing dlq replay` wrote back
// (x-replayed-at) is not observed again in billing_event_delay_seconds,
// whose event was observed when it was dead-lettered: replaying 30 records
// of hours ago paged BillingEventDelayBudgetBurn (issue 31.6). It is
// counted in billing_replayed_events_total by its outcome instead.
func TestReplayedEventsMeasuredApart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) { return order.OutcomeCharged, nil }}
	hoursAgo := time.Now().Add(-7 * time.Hour).UTC().Format(time.RFC3339Nano)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	if err := w.WriteMessages(context.Background(),
		kafkago.Message{Key: []byte("replayed"), Value: []byte(`{"event_id":"x","occurred_at":"` + hoursAgo + `"}`),
			Headers: []kafkago.Header{{Key: HeaderReplayedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339))}}},
		kafkago.Message{Key: []byte("fresh"), Value: []byte(`{"event_id":"y","occurred_at":"` + now + `"}`)},
	); err != nil {
		t.Fatal(err)
	}
	r.run(t, 0, r.topic, r.group, h, kafkatest.NewMessageWriter(t, r.brokers, ""))

	poll.Until(t, "both events final", 15*time.Second, func() bool {
		return testutil.ToFloat64(r.m.Events.WithLabelValues(string(order.OutcomeCharged))) == 2
	})
	if n, _, within := histogramOf(t, r.m.EventDelay, 60); n != 1 || within != 1 {
		t.Errorf("billing_event_delay_seconds: %d observations, %d within 60 s; want only the fresh event's", n, within)
	}
	if got := testutil.ToFloat64(r.m.ReplayedEvents.WithLabelValues(string(order.OutcomeCharged))); got != 1 {
		t.Errorf("billing_replayed_events_total{outcome=charged} = %v, want 1", got)
	}
}
