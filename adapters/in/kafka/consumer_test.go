package kafka

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// scriptedHandler answers per record value; the consumer and Kafka are real.
type scriptedHandler struct {
	mu    sync.Mutex
	calls map[string]int
	fn    func(value string, call int) (order.Outcome, error)
}

func (h *scriptedHandler) Handle(_ context.Context, msg Record) (order.Outcome, error) {
	h.mu.Lock()
	if h.calls == nil {
		h.calls = map[string]int{}
	}
	h.calls[string(msg.Value)]++
	n := h.calls[string(msg.Value)]
	h.mu.Unlock()
	return h.fn(string(msg.Value), n)
}

func (h *scriptedHandler) count(v string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[v]
}

// failingWriter refuses every write while failing is set, then passes
// writes to a real Kafka writer.
type failingWriter struct {
	w       MessageWriter
	failing atomic.Bool
	refused atomic.Int64
}

func (f *failingWriter) WriteMessages(ctx context.Context, msgs ...kafkaclient.Message) error {
	if f.failing.Load() {
		f.refused.Add(1)
		return errors.New("injected: broker did not acknowledge")
	}
	return f.w.WriteMessages(ctx, msgs...)
}

// fastPolicy is the service's policy with tierDelays, and outage waits short
// enough for a test to see an event held and let go several times.
func fastPolicy(tierDelays ...time.Duration) order.RetryPolicy {
	p := order.NewRetryPolicy(tierDelays...)
	p.Outage = order.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	return p
}

type rig struct {
	brokers []string
	topic   string
	group   string
	m       *metrics.Metrics
	routes  Routes
	log     *slog.Logger // the consumers' log; nil discards it
}

func newRig(t *testing.T) *rig {
	t.Helper()
	c := kafkatest.NewFake(t)
	r := &rig{brokers: c.Brokers(), topic: "main", group: "g", m: metrics.New(prometheus.NewRegistry(), false),
		routes: Routes{Group: "g", RetryTopics: []string{"retry.1"}, DLQTopic: "dlq", Policy: fastPolicy(100 * time.Millisecond)}}
	kafkatest.CreateTopics(t, r.brokers, 2, "main", "retry.1", "dlq")
	return r
}

// run consumes topic (tier), routing through w, until stop is called; it
// returns stop, which waits for Run to return.
func (r *rig) run(t *testing.T, tier int, topic, group string, h MessageHandler, w MessageWriter) func() {
	t.Helper()
	reader := newTestSource(t, kafkatest.FastReaderConfig(r.brokers, group, topic))
	log := r.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pause := health.NewPause(&metrics.Outage{Paused: r.m.ConsumerPaused}, log)
	c := NewConsumer(reader, h, NewRouter(NewClientWriter(w), r.routes, r.m.Router(), pause, log), pause, r.m.Consumer(), log,
		Options{Tier: tier, MaxInFlight: 4,
			CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second, RevokeTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			_ = reader.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

func (r *rig) send(t *testing.T, values ...string) {
	t.Helper()
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	var msgs []kafkago.Message
	for _, v := range values {
		msgs = append(msgs, kafkago.Message{Key: []byte(v), Value: []byte(v)})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

// A DLQ write that is never acknowledged must leave the offset uncommitted;
// the record comes back to the next consumer and then reaches the DLQ.
func TestFailedDLQWriteIsNotCommitted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(v string, _ int) (order.Outcome, error) {
		if v == "bad" {
			return "", &order.ValidationError{Field: "event_id", Reason: "not a UUID"}
		}
		return order.OutcomeCharged, nil
	}}
	fw := &failingWriter{w: kafkatest.NewMessageWriter(t, r.brokers, "")}
	fw.failing.Store(true)
	r.send(t, "ok-1", "bad", "ok-2")

	stop := r.run(t, 0, r.topic, r.group, h, fw)
	poll.Until(t, "the DLQ write to be refused a few times", 15*time.Second, func() bool { return fw.refused.Load() >= 3 })
	poll.Until(t, "the good records to be handled", 15*time.Second, func() bool { return h.count("ok-1") == 1 && h.count("ok-2") == 1 })
	stop()

	// "bad" shares no key with the others but sits in some partition: that
	// partition's commit must stop below it.
	ends := kafkatest.EndOffsets(t, r.brokers, r.topic)
	committed := kafkatest.CommittedOffsets(t, r.brokers, r.group, r.topic)
	behind := 0
	for p, end := range ends {
		if committed[p] < end {
			behind++
		}
	}
	if behind != 1 {
		t.Fatalf("committed %v of end %v: want exactly the partition holding the unrouted record behind", committed, ends)
	}
	if got := testutil.ToFloat64(r.m.Events.WithLabelValues("dead_lettered")); got != 0 {
		t.Errorf("dead_lettered = %v before any acknowledged write", got)
	}

	// The writes work again: the record is redelivered, routed, committed.
	fw.failing.Store(false)
	r.run(t, 0, r.topic, r.group, h, fw)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 1, 10*time.Second)
	if string(dlq[0].Value) != "bad" {
		t.Errorf("DLQ value = %q, want the raw record", dlq[0].Value)
	}
	if h.count("bad") < 2 {
		t.Errorf("bad handled %d times, want it redelivered", h.count("bad"))
	}
}

// Transient failures go to the tier with x-attempt and x-not-before; the
// tier waits, retries, and after the last tier the record is dead-lettered.
func TestTransientGoesThroughTiersToDLQ(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(v string, n int) (order.Outcome, error) {
		if v == "flaky" && n == 1 {
			return "", &order.TransientError{Op: "charge", Err: errors.New("503")}
		}
		if v == "down" {
			return "", &order.TransientError{Op: "charge", Err: errors.New("503")}
		}
		return order.OutcomeCharged, nil
	}}
	w := kafkatest.NewMessageWriter(t, r.brokers, "")
	r.send(t, "flaky", "down")
	r.run(t, 0, r.topic, r.group, h, w)
	r.run(t, 1, "retry.1", "g.retry.1", h, w)

	poll.Until(t, "flaky billed on the tier", 15*time.Second, func() bool { return h.count("flaky") == 2 })
	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 1, 15*time.Second)
	hs := map[string]string{}
	for _, hd := range dlq[0].Headers {
		hs[hd.Key] = string(hd.Value)
	}
	if string(dlq[0].Value) != "down" || hs["x-attempt"] != "1" || hs["x-error-class"] != "transient" || hs["x-original-topic"] != "main" {
		t.Errorf("DLQ record %q headers %v", dlq[0].Value, hs)
	}
	retried := kafkatest.ReadAll(t, r.brokers, "retry.1", 2, 10*time.Second)
	for _, m := range retried {
		var attempt, notBefore string
		for _, hd := range m.Headers {
			switch hd.Key {
			case HeaderAttempt:
				attempt = string(hd.Value)
			case HeaderNotBefore:
				notBefore = string(hd.Value)
			}
		}
		if attempt != "1" || notBefore == "" {
			t.Errorf("retry record %q: x-attempt %q, x-not-before %q", m.Value, attempt, notBefore)
		}
	}
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	kafkatest.WaitCommitted(t, r.brokers, "g.retry.1", "retry.1", 15*time.Second)
}

// An outage is retried in place: nothing is routed, the consumer pauses,
// and it resumes by itself.
func TestOutagePausesWithoutRouting(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var down atomic.Bool
	down.Store(true)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) {
		if down.Load() {
			return "", &order.OutageError{Dependency: "postgres", Err: errors.New("connection refused")}
		}
		return order.OutcomeCharged, nil
	}}
	fw := &failingWriter{w: kafkatest.NewMessageWriter(t, r.brokers, "")}
	r.send(t, "a", "b", "c")
	r.run(t, 0, r.topic, r.group, h, fw)
	poll.Until(t, "the pause", 15*time.Second, func() bool { return testutil.ToFloat64(r.m.ConsumerPaused) == 1 })
	poll.Until(t, "a few retries in place", 15*time.Second, func() bool { return h.count("a")+h.count("b")+h.count("c") >= 6 })
	down.Store(false)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	if got := testutil.ToFloat64(r.m.ConsumerPaused); got != 0 {
		t.Errorf("paused = %v after recovery", got)
	}
	if got := testutil.ToFloat64(r.m.Events.WithLabelValues("charged")); got != 3 {
		t.Errorf("charged = %v, want 3", got)
	}
	if n := testutil.ToFloat64(r.m.RoutedWrites.WithLabelValues("dlq", "ok")) + testutil.ToFloat64(r.m.RoutedWrites.WithLabelValues("retry.1", "ok")); n != 0 {
		t.Errorf("%v records routed during an outage, want 0", n)
	}
}

// TestPartitionOwnerIsKnown: which partitions a pod owns is in its log at
// every assignment and in billing_partition_assigned, which loses the
// partitions when the pod stops holding them (BillingPartitionStuck's
// runbook restarts the owner of a stuck partition).
func TestPartitionOwnerIsKnown(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var logs syncbuf.Buffer
	r.log = slog.New(slog.NewJSONHandler(&logs, nil))
	stop := r.run(t, 0, r.topic, r.group, &chargeAll{}, kafkatest.NewMessageWriter(t, r.brokers, ""))
	poll.Until(t, "both partitions of main owned", 30*time.Second, func() bool {
		return testutil.CollectAndCount(r.m.Assigned) == 2 &&
			testutil.ToFloat64(r.m.Assigned.WithLabelValues(r.topic, "0")) == 1 && testutil.ToFloat64(r.m.Assigned.WithLabelValues(r.topic, "1")) == 1
	})
	if out := logs.String(); !strings.Contains(out, `"msg":"partitions assigned"`) || !strings.Contains(out, `"assigned":{"main":[0,1]}`) {
		t.Errorf("log has no line naming the partitions assigned:\n%s", out)
	}
	stop()
	if n := testutil.CollectAndCount(r.m.Assigned); n != 0 {
		t.Errorf("billing_partition_assigned has %d series after the consumer stopped, want none", n)
	}
}
