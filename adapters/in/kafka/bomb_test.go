package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// bombCodecs are the codecs kafka-go reads, one partition each.
var bombCodecs = []kafkago.Compression{kafkago.Gzip, kafkago.Snappy, kafkago.Lz4, kafkago.Zstd}

// produceBombs writes to each partition p of topic a record before, a batch
// compressed with bombCodecs[p] of records whose values are each of zeros
// bytes, and a record after: offsets 0, 1..n, n+1. Keys and values name the
// partition.
func produceBombs(t *testing.T, brokers []string, topic string, n, zeros int) {
	t.Helper()
	for p, codec := range bombCodecs {
		plain := func(name string) kafkatest.BatchRecord {
			v := fmt.Sprintf("p%d-%s", p, name)
			return kafkatest.BatchRecord{Key: []byte(v), Value: []byte(v)}
		}
		kafkatest.ProduceBatch(t, brokers, topic, p, 0, plain("before"))
		var bomb []kafkatest.BatchRecord
		for i := range n {
			bomb = append(bomb, kafkatest.BatchRecord{Key: fmt.Appendf(nil, "p%d-bomb-%d", p, i), Zeros: zeros})
		}
		size := kafkatest.ProduceBatch(t, brokers, topic, p, codec, bomb...)
		t.Logf("partition %d: a %s batch of %d bytes holding %d MiB", p, codec, size, n*zeros>>20)
		kafkatest.ProduceBatch(t, brokers, topic, p, 0, plain("after"))
	}
}

// A compressed batch that holds more than the bound once decompressed, on
// every partition at once and in every codec: the records around it are
// handled, each of its records goes to the DLQ as a stub of unknown size
// whose x-error names the batch, nothing of it reaches the handler, and
// every offset is committed.
func TestBombOnEveryPartitionGoesToTheDLQAsStubs(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t, kafkatest.WithMaxMessageBytes(16<<20)).Brokers()
	const topic, group, n = "main", "g", 3
	kafkatest.CreateTopics(t, brokers, len(bombCodecs), topic, topic+".dlq", topic+".retry.1")
	// 3 × 12 MiB: over the 32 MiB the readers decompress by default.
	produceBombs(t, brokers, topic, n, 12<<20)

	h := &recordingHandler{}
	stop := member(t, brokers, group, topic, "a", h)
	poll.Until(t, "every record handled or dead-lettered, and committed to the end", 60*time.Second, func() bool {
		c := kafkatest.CommittedOffsets(t, brokers, group, topic)
		for p := range bombCodecs {
			if c[p] != n+2 {
				return false
			}
		}
		return true
	})
	stop()
	for p := range bombCodecs {
		for _, v := range []string{"before", "after"} {
			if !h.saw(fmt.Sprintf("p%d-%s", p, v)) {
				t.Errorf("p%d-%s not handled", p, v)
			}
		}
	}
	if big := h.largest(); big > 0 {
		t.Errorf("the handler got a record of %d bytes: a bomb was decoded", big)
	}
	dlq := kafkatest.ReadAll(t, brokers, topic+".dlq", n*len(bombCodecs), 15*time.Second)
	if len(dlq) != n*len(bombCodecs) {
		t.Fatalf("%d DLQ records, want %d", len(dlq), n*len(bombCodecs))
	}
	seen := map[string]bool{}
	for _, m := range dlq {
		hs := headerMap(m)
		p, _ := strconv.Atoi(hs[HeaderOriginalPartition])
		off, _ := strconv.Atoi(hs[HeaderOriginalOffset])
		seen[fmt.Sprint(p, off)] = true
		codec := bombCodecs[p].String()
		for _, want := range []string{topic + "/" + strconv.Itoa(p), codec + " record batch at base offset 1 (offsets 1-3)",
			"decompresses to more than 33554432 bytes", "BILLING_KAFKA_MAX_BATCH_BYTES"} {
			if !strings.Contains(hs[HeaderError], want) {
				t.Errorf("DLQ stub of %d@%d: x-error %q lacks %q", p, off, hs[HeaderError], want)
			}
		}
		if len(m.Value) != 0 || hs[HeaderValueOmitted] != ValueOmittedUnknown || hs[HeaderOriginalTopic] != topic ||
			hs[HeaderErrorClass] != "permanent" || off < 1 || off > n {
			t.Errorf("DLQ record %d@%d: value %d bytes, headers %v; want a stub of unknown size", p, off, len(m.Value), hs)
		}
	}
	if len(seen) != n*len(bombCodecs) {
		t.Errorf("stubs for %d distinct offsets, want %d", len(seen), n*len(bombCodecs))
	}
}

// The readers' decoding and the events in flight are charged to the
// process's one budget, and all of it comes back: after bombs, records
// handled, records left in the readers' queues when the consumers stop.
func TestMemoryBudgetIsGivenBack(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	const topic, group = "main", "g"
	kafkatest.CreateTopics(t, brokers, len(bombCodecs), topic, topic+".dlq", topic+".retry.1")
	produceBombs(t, brokers, topic, 2, 2<<20)
	var more []kafkago.Message
	for i := range 400 {
		more = append(more, kafkago.Message{Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 10_000)})
	}
	w := kafkatest.NewWriter(t, brokers, topic)
	w.BatchBytes, w.Compression = 1<<20, kafkago.Zstd
	if err := w.WriteMessages(context.Background(), more...); err != nil {
		t.Fatal(err)
	}

	m := metrics.New(prometheus.NewRegistry(), false)
	budget := &countedBudget{MemoryBudget: NewMemoryBudget(4<<20, m.Budget())}
	h := &recordingHandler{}
	log := slog.New(slog.DiscardHandler)
	pause := health.NewPause(&metrics.Outage{Paused: m.ConsumerPaused}, log)
	cfg := kafkatest.FastReaderConfig(brokers, group, topic)
	cfg.MaxBatchBytes, cfg.Budget = 1<<20, budget
	src := newTestSource(t, cfg)
	routes := Routes{Group: group, RetryTopics: []string{topic + ".retry.1"}, DLQTopic: topic + ".dlq", Policy: order.NewRetryPolicy(time.Second)}
	c := NewConsumer(src, h, NewRouter(NewClientWriter(kafkatest.NewMessageWriter(t, brokers, "")), routes, m.Router(), pause, log), pause, m.Consumer(), log,
		Options{MaxInFlight: 8, CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	poll.Until(t, "part of the records handled", 30*time.Second, func() bool { return h.count() >= 100 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if all, records := budget.Held(); all != 0 || records != 0 {
		t.Errorf("after the consumer stopped the budget holds %d bytes (%d of records)", all, records)
	}
	if held, limit := testutil.ToFloat64(m.ReadBudget.WithLabelValues("held")), testutil.ToFloat64(m.ReadBudget.WithLabelValues("limit")); held != 0 || limit != 4<<20 {
		t.Errorf("billing_read_budget_bytes: held %v, limit %v; want 0, %d", held, limit, 4<<20)
	}
	if budget.records.Load() < 100 || budget.batches.Load() == 0 {
		t.Errorf("the budget was charged for %d records and %d batches", budget.records.Load(), budget.batches.Load())
	}
}

// countedBudget counts the charges of a MemoryBudget.
type countedBudget struct {
	*MemoryBudget
	records, batches atomic.Int64
}

func (b *countedBudget) AcquireRecord(ctx context.Context, n int64) error {
	b.records.Add(1)
	return b.MemoryBudget.AcquireRecord(ctx, n)
}

func (b *countedBudget) AcquireBatch(ctx context.Context, n int64) error {
	b.batches.Add(1)
	return b.MemoryBudget.AcquireBatch(ctx, n)
}

// recordingHandler charges every record and remembers what it saw.
type recordingHandler struct {
	mu     sync.Mutex
	seen   map[string]int
	big, n int
}

func (h *recordingHandler) Handle(_ context.Context, msg Record) (order.Outcome, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]int{}
	}
	h.seen[string(msg.Key)]++
	h.n++
	if len(msg.Value) > 1<<20 {
		h.big = max(h.big, len(msg.Value))
	}
	return order.OutcomeCharged, nil
}

func (h *recordingHandler) saw(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[key] > 0
}

func (h *recordingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *recordingHandler) largest() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.big
}

// The 4096-header edge (docs/interface.md §5): the limit counts a record's own
// headers. A record with exactly 4096 of them is handled on the main topic,
// handled again on a retry tier with its routing headers (x-original-*,
// x-not-before) and its traceparent, and reaches the DLQ with all of them;
// a record with 4097 of its own is a stub, never handled. (Before, the
// tier's copy carried 4105 headers and became a stub there.)
func TestHeaderEdgeKeepsRoutingHeadersThroughTiers(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	edge := func(n int, v string) kafkago.Message {
		m := kafkago.Message{Key: []byte(v), Value: []byte(v)}
		for i := range n - 1 {
			m.Headers = append(m.Headers, kafkago.Header{Key: "h", Value: []byte(strconv.Itoa(i % 10))})
		}
		m.Headers = append(m.Headers, kafkago.Header{Key: "traceparent", Value: []byte(tp)})
		return m
	}
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	if err := w.WriteMessages(context.Background(), edge(MaxRecordHeaders, "edge"), edge(MaxRecordHeaders+1, "over")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var onTier []string // what the tier saw wrong, if anything
	tierSaw := 0
	h := &scriptedHandler{fn: func(v string, call int) (order.Outcome, error) {
		if call == 1 {
			return "", &order.TransientError{Op: "charge", Err: fmt.Errorf("503")}
		}
		return "", &order.ValidationError{Field: "value", Reason: "not an event"}
	}}
	tier := &inspect{next: h, check: func(msg Record) {
		mu.Lock()
		defer mu.Unlock()
		tierSaw++
		if own := ownHeaders(msg.Headers); own != MaxRecordHeaders {
			onTier = append(onTier, fmt.Sprintf("%d headers of its own", own))
		}
		for _, k := range []string{HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderNotBefore, "traceparent"} {
			if _, ok := msg.Header(k); !ok {
				onTier = append(onTier, "no "+k)
			}
		}
	}}
	wr := kafkatest.NewMessageWriter(t, r.brokers, "")
	r.run(t, 0, r.topic, r.group, h, wr)
	r.run(t, 1, "retry.1", "g.retry.1", tier, wr)
	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 2, 30*time.Second)
	mu.Lock()
	if tierSaw != 1 || len(onTier) > 0 {
		t.Errorf("the tier handled the record %d times, saw: %v", tierSaw, onTier)
	}
	mu.Unlock()
	if h.count("over") != 0 {
		t.Errorf("the record of %d headers of its own was handled %d times", MaxRecordHeaders+1, h.count("over"))
	}
	for _, m := range dlq {
		hs := headerMap(m)
		own := ownHeaders(headersOf(m.Headers))
		switch string(m.Key) {
		case "edge":
			if string(m.Value) != "edge" || own != MaxRecordHeaders || hs["traceparent"] != tp || hs[HeaderOriginalTopic] != r.topic ||
				hs[HeaderAttempt] != "1" || hs[HeaderOriginalOffset] == "" || hs[HeaderValueOmitted] != "" {
				t.Errorf("DLQ copy of the edge record: value %q, %d own headers, routing %v", m.Value, own, routing(hs))
			}
		case "over":
			if len(m.Value) != 0 || hs[HeaderValueOmitted] != "4" || hs[HeaderAttempt] != "0" || len(m.Headers) > 20 {
				t.Errorf("DLQ copy of the record over the edge: value %q, %d headers, routing %v; want a stub", m.Value, len(m.Headers), routing(hs))
			}
		default:
			t.Errorf("unexpected DLQ record %q", m.Key)
		}
	}
}

// inspect calls check with each record, then next.
type inspect struct {
	next  MessageHandler
	check func(Record)
}

func (i *inspect) Handle(ctx context.Context, msg Record) (order.Outcome, error) {
	i.check(msg)
	return i.next.Handle(ctx, msg)
}

// routing is the routing headers of hs, for messages.
func routing(hs map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range serviceHeaders {
		if v, ok := hs[k]; ok {
			out[k] = v
		}
	}
	return out
}
