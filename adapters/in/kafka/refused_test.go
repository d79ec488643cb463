package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
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
)

// pauseWatch is billing_consumer_paused that remembers whether it was ever
// set: a pause between two polls would otherwise go unseen.
type pauseWatch struct {
	prometheus.Gauge
	ever atomic.Bool
}

func (g *pauseWatch) Set(v float64) {
	if v != 0 {
		g.ever.Store(true)
	}
	g.Gauge.Set(v)
}

// createTopic creates topic with one partition and configs on brokers.
func createTopic(t *testing.T, brokers []string, topic string, configs map[string]string) {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: 30 * time.Second}
	tc := kafkago.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}
	for k, v := range configs {
		tc.ConfigEntries = append(tc.ConfigEntries, kafkago.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	res, err := cl.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{tc}})
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := res.Errors[topic]; err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	kafkatest.CreateTopics(t, brokers, 1, topic) // waits for the leader
}

// refusedRig is a main topic, a tier and a DLQ on the real broker, the
// tier and the DLQ with Kafka's default 1 MiB limit, consumed by a Consumer
// whose every record is a permanent error.
type refusedRig struct {
	brokers        []string
	main, tier, dl string
	group          string
	m              *metrics.Metrics
	paused         *pauseWatch
}

func newRefusedRig(t *testing.T, mainMax int) *refusedRig {
	t.Helper()
	c := kafkatest.SharedReal(t)
	r := &refusedRig{brokers: c.Brokers(), main: kafkatest.UniqueName(t, "main"), tier: kafkatest.UniqueName(t, "tier"),
		dl: kafkatest.UniqueName(t, "dlq"), group: kafkatest.UniqueName(t, "g")}
	createTopic(t, r.brokers, r.main, map[string]string{"max.message.bytes": strconv.Itoa(mainMax)})
	oneMiB := map[string]string{"max.message.bytes": strconv.Itoa(1 << 20)}
	createTopic(t, r.brokers, r.tier, oneMiB)
	createTopic(t, r.brokers, r.dl, oneMiB)
	reg := prometheus.NewRegistry()
	r.m = metrics.New(reg, false)
	r.paused = &pauseWatch{Gauge: r.m.ConsumerPaused}
	return r
}

// produce writes values (keyed by their index) to the main topic in one
// batch per value, with a writer that accepts records up to 32 MiB.
func (r *refusedRig) produce(t *testing.T, values ...[]byte) {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(r.brokers...), Topic: r.main, Transport: tr, BatchBytes: 32 << 20,
		BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireAll}
	defer w.Close()
	for i, v := range values {
		if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("k" + strconv.Itoa(i)), Value: v}); err != nil {
			t.Fatalf("produce record %d (%d bytes): %v", i, len(v), err)
		}
	}
}

// consume runs a main-topic consumer whose every record is a permanent
// error, routing through the production writer, until the returned stop.
func (r *refusedRig) consume(t *testing.T) (stop func()) {
	t.Helper()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: r.brokers, ClientID: "billing-test"})
	if err != nil {
		t.Fatal(err)
	}
	w, closeW := kc.NewWriter()
	log := slog.New(slog.DiscardHandler)
	pause := health.NewPause(&metrics.Outage{Paused: r.paused}, log)
	routes := Routes{Group: r.group, RetryTopics: []string{r.tier}, DLQTopic: r.dl, Policy: fastPolicy(time.Second)}
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) {
		return "", &order.ValidationError{Field: "value", Reason: "not JSON"}
	}}
	reader := newTestSource(t, kafkatest.FastReaderConfig(r.brokers, r.group, r.main))
	c := NewConsumer(reader, h, NewRouter(NewClientWriter(w), routes, r.m.Router(), pause, log), pause, r.m.Consumer(), log,
		Options{MaxInFlight: 4, CommitInterval: 20 * time.Millisecond, DrainTimeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			_ = reader.Close()
			_ = closeW()
		})
	}
	t.Cleanup(stop)
	return stop
}

func headerMap(m kafkago.Message) map[string]string {
	hs := map[string]string{}
	for _, h := range m.Headers {
		hs[h.Key] = string(h.Value)
	}
	return hs
}

// A malformed record that fits the main topic but not the DLQ (1 MiB, the
// broker's default) reaches the DLQ as an x-value-omitted stub; the two
// small bad records beside it reach the DLQ whole; the partition's offset
// moves past all three and the consumer never pauses (docs/interface.md §5).
func TestRefusedDLQWriteBecomesStub(t *testing.T) {
	t.Parallel()
	r := newRefusedRig(t, 2<<20)
	big := bytes.Repeat([]byte("x"), 1_048_400)
	r.produce(t, []byte("small-1"), big, []byte("small-2"))

	r.consume(t)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.main, 60*time.Second)
	dlq := kafkatest.ReadAll(t, r.brokers, r.dl, 3, 10*time.Second)

	if r.paused.ever.Load() {
		t.Error("the consumer paused: a refused write was taken for a Kafka outage")
	}
	var stubs, whole int
	for _, m := range dlq {
		hs := headerMap(m)
		if hs[HeaderOriginalTopic] != r.main || hs[HeaderOriginalPartition] != "0" {
			t.Errorf("DLQ record at %d: x-original-* %v", m.Offset, hs)
		}
		switch {
		case string(m.Value) == "small-1" || string(m.Value) == "small-2":
			whole++
			if _, ok := hs[HeaderValueOmitted]; ok {
				t.Errorf("small record %q carries x-value-omitted", m.Value)
			}
		case len(m.Value) == 0:
			stubs++
			if hs[HeaderValueOmitted] != strconv.Itoa(len(big)) || hs[HeaderOriginalOffset] != "1" || string(m.Key) != "k1" {
				t.Errorf("stub: key %q, headers %v", m.Key, hs)
			}
		default:
			t.Errorf("unexpected DLQ record of %d bytes", len(m.Value))
		}
	}
	if stubs != 1 || whole != 2 {
		t.Errorf("DLQ holds %d stubs and %d whole records, want 1 and 2", stubs, whole)
	}
	if got := testutil.ToFloat64(r.m.RoutedWrites.WithLabelValues(r.dl, "refused")); got != 1 {
		t.Errorf(`billing_routed_writes_total{result="refused"} = %v, want 1`, got)
	}
}

// A record over the production writer's BatchBytes (16 MiB), which the
// main topic accepts, reaches the DLQ as a stub: kafka-go refuses it before
// sending (kafka.MessageTooLargeError), a refusal for good.
func TestRecordOverWriterBatchBytesBecomesStub(t *testing.T) {
	t.Parallel()
	r := newRefusedRig(t, 20<<20)
	huge := bytes.Repeat([]byte("h"), 17<<20)
	r.produce(t, []byte("small"), huge)
	r.consume(t)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.main, 60*time.Second)
	dlq := kafkatest.ReadAll(t, r.brokers, r.dl, 2, 10*time.Second)
	if hs := headerMap(dlq[1]); len(dlq[1].Value) != 0 || hs[HeaderValueOmitted] != strconv.Itoa(len(huge)) {
		t.Errorf("DLQ record for the huge one: %d value bytes, x-value-omitted %q", len(dlq[1].Value), hs[HeaderValueOmitted])
	}
	if r.paused.ever.Load() {
		t.Error("the consumer paused")
	}
}

// The time from start to quiescence (every offset committed) with a 1.5 MiB
// bad record among small ones; logged, not asserted (no timing assertions).
func TestRefusedQuiescenceTime(t *testing.T) {
	t.Parallel()
	r := newRefusedRig(t, 2<<20)
	values := [][]byte{[]byte("a"), bytes.Repeat([]byte("y"), 3<<19), []byte("b"), []byte("c")}
	r.produce(t, values...)
	start := time.Now()
	r.consume(t)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.main, 60*time.Second)
	t.Logf("quiescence with a 1.5 MiB bad record: %v", time.Since(start).Round(time.Millisecond))
	kafkatest.ReadAll(t, r.brokers, r.dl, len(values), 10*time.Second)
	if r.paused.ever.Load() {
		t.Error("the consumer paused")
	}
}

// batchedWith refuses every batched write as a broker refuses a batch for
// a neighbour's size (the neighbour keeps being retried beside it); writes
// alone pass to the real writer w.
type batchedWith struct{ w MessageWriter }

func (b *batchedWith) WriteMessages(context.Context, ...kafkaclient.Message) error {
	return kafkago.WriteErrors{kafkago.MessageSizeTooLarge}
}

func (b *batchedWith) WriteAlone(ctx context.Context, msg kafkaclient.Message) error {
	return b.w.WriteMessages(ctx, msg)
}

// A record whose batch was refused for a neighbour is written alone, whole,
// and not counted as refused.
func TestNeighbourOfRefusedRecordIsWrittenWhole(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) {
		return "", &order.ValidationError{Field: "value", Reason: "not JSON"}
	}}
	r.send(t, "small")
	r.run(t, 0, r.topic, r.group, h, &batchedWith{w: kafkatest.NewMessageWriter(t, r.brokers, "")})
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 1, 10*time.Second)
	if string(dlq[0].Value) != "small" {
		t.Errorf("DLQ value %q, want the record whole", dlq[0].Value)
	}
	if _, ok := headerMap(dlq[0])[HeaderValueOmitted]; ok {
		t.Error("the neighbour was written as a stub")
	}
	if got := testutil.ToFloat64(r.m.RoutedWrites.WithLabelValues("dlq", ResultRefused)); got != 0 {
		t.Errorf("refused = %v, want 0", got)
	}
}

// A record over the writer's BatchBytes (kafka-go refuses it before
// sending, with kafka.MessageTooLargeError) is routed as a stub.
func TestRecordOverBatchBytesBecomesStub(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) {
		return "", &order.ValidationError{Field: "value", Reason: "not JSON"}
	}}
	big := string(bytes.Repeat([]byte("z"), 8<<10))
	if err := kafkatest.NewWriter(t, r.brokers, r.topic).WriteMessages(context.Background(),
		kafkago.Message{Key: []byte("big"), Value: []byte(big)}, kafkago.Message{Key: []byte("small"), Value: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	w := kafkatest.NewMessageWriter(t, r.brokers, "")
	w.BatchBytes = 4 << 10
	r.run(t, 0, r.topic, r.group, h, w)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 2, 10*time.Second)
	for _, m := range dlq {
		hs := headerMap(m)
		if string(m.Key) == "big" && (len(m.Value) != 0 || hs[HeaderValueOmitted] != strconv.Itoa(len(big))) {
			t.Errorf("big record routed with %d value bytes, x-value-omitted %q", len(m.Value), hs[HeaderValueOmitted])
		}
		if string(m.Key) == "small" && string(m.Value) != "small" {
			t.Errorf("small record routed as %q", m.Value)
		}
	}
}

// refusingWriter refuses every write to topic as not authorised while
// refusing is set.
type refusingWriter struct {
	w        MessageWriter
	topic    string
	refusing atomic.Bool
}

func (f *refusingWriter) WriteMessages(ctx context.Context, msgs ...kafkaclient.Message) error {
	for _, m := range msgs {
		if m.Topic == f.topic && f.refusing.Load() {
			return kafkago.WriteErrors{kafkago.TopicAuthorizationFailed}
		}
	}
	return f.w.WriteMessages(ctx, msgs...)
}

// When even the stub is refused (the DLQ not authorised), the DLQ is
// unwritable: a fault of the service, not of the record (docs/interface.md §4). The
// consumer pauses, never commits past the record, and once the DLQ takes
// writes again the record reaches it and consumption resumes.
func TestRefusedStubPauses(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(v string, _ int) (order.Outcome, error) {
		if v == "bad" {
			return "", &order.ValidationError{Field: "value", Reason: "not JSON"}
		}
		return order.OutcomeCharged, nil
	}}
	r.send(t, "bad", "ok-1", "ok-2")
	var bad kafkago.Message
	for _, m := range kafkatest.ReadAll(t, r.brokers, r.topic, 3, 10*time.Second) {
		if string(m.Value) == "bad" {
			bad = m
		}
	}
	w := &refusingWriter{w: kafkatest.NewMessageWriter(t, r.brokers, ""), topic: "dlq"}
	w.refusing.Store(true)
	r.run(t, 0, r.topic, r.group, h, w)
	poll.Until(t, "the pause, the stub refused", 15*time.Second, func() bool {
		return testutil.ToFloat64(r.m.ConsumerPaused) == 1 &&
			testutil.ToFloat64(r.m.RoutedWrites.WithLabelValues("dlq", ResultRefused)) >= 4
	})
	if got := kafkatest.CommittedOffsets(t, r.brokers, r.group, r.topic)[bad.Partition]; got > bad.Offset {
		t.Fatalf("partition %d committed to %d past the record whose stub was refused (offset %d)", bad.Partition, got, bad.Offset)
	}

	w.refusing.Store(false)
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 1, 10*time.Second)
	if len(dlq) != 1 || string(dlq[0].Value) != "bad" {
		t.Errorf("DLQ holds %d records, want the refused one whole", len(dlq))
	}
	poll.Until(t, "consumption to resume", 10*time.Second, func() bool { return testutil.ToFloat64(r.m.ConsumerPaused) == 0 })
}

// billing_routed_writes_total{result="refused"} exists from the first scrape.
func TestRefusedSeriesFromTheStart(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, false)
	NewRouter(nil, Routes{RetryTopics: []string{"t.1"}, DLQTopic: "d"}, m.Router(), nil, slog.New(slog.DiscardHandler))
	n, err := testutil.GatherAndCount(reg, "billing_routed_writes_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Errorf("%d series of billing_routed_writes_total, want 6 (ok, error, refused for t.1 and d)", n)
	}
}
