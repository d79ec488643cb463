package kafka

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// Routing headers a producer put on a main-topic record are replaced: the
// DLQ copy names where it really was, carries each routing header once,
// and keeps the producer's other headers.
func TestForgedRoutingHeadersOnMainAreReplaced(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	forged := []kafkago.Header{
		{Key: HeaderOriginalTopic, Value: []byte("payments")}, {Key: HeaderOriginalPartition, Value: []byte("9")},
		{Key: HeaderOriginalOffset, Value: []byte("999")}, {Key: HeaderAttempt, Value: []byte("7")},
		{Key: HeaderValueOmitted, Value: []byte("5")}, {Key: HeaderConsumerGroup, Value: []byte("other")},
		{Key: "x-request-id", Value: []byte("req-1")},
	}
	w := kafkatest.NewWriter(t, r.brokers, r.topic)
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("k"), Value: []byte("bad"), Headers: forged}); err != nil {
		t.Fatal(err)
	}
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) {
		return "", &order.ValidationError{Field: "value", Reason: "not JSON"}
	}}
	r.run(t, 0, r.topic, r.group, h, kafkatest.NewMessageWriter(t, r.brokers, ""))
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	src := kafkatest.ReadAll(t, r.brokers, r.topic, 1, 10*time.Second)[0]
	got := kafkatest.ReadAll(t, r.brokers, "dlq", 1, 10*time.Second)[0]

	count := map[string]int{}
	for _, hd := range got.Headers {
		count[hd.Key]++
	}
	hs := headerMap(got)
	want := map[string]string{
		HeaderOriginalTopic: r.topic, HeaderOriginalPartition: itoa(src.Partition), HeaderOriginalOffset: itoa(int(src.Offset)),
		HeaderAttempt: "0", HeaderConsumerGroup: "g", "x-request-id": "req-1",
	}
	for k, v := range want {
		if hs[k] != v || count[k] != 1 {
			t.Errorf("%s = %q (%d times), want %q once", k, hs[k], count[k], v)
		}
	}
	if _, ok := hs[HeaderValueOmitted]; ok {
		t.Errorf("forged x-value-omitted kept on a record routed whole")
	}
}

// From a tier, x-original-* and x-value-omitted are ours and are kept.
func TestTierKeepsOriginalHeaders(t *testing.T) {
	t.Parallel()
	msg := Record{Topic: "retry.1", Partition: 1, Offset: 5, Headers: []Header{
		{Key: HeaderOriginalTopic, Value: []byte("main")}, {Key: HeaderOriginalPartition, Value: []byte("0")},
		{Key: HeaderOriginalOffset, Value: []byte("42")}, {Key: HeaderValueOmitted, Value: []byte("2000000")},
		{Key: HeaderAttempt, Value: []byte("1")},
	}}
	hs := map[string]string{}
	for _, h := range routedHeaders(msg, 1, "g", order.ClassPermanent, errors.New("x"), time.Now()) {
		hs[h.Key] = string(h.Value)
	}
	if hs[HeaderOriginalTopic] != "main" || hs[HeaderOriginalOffset] != "42" || hs[HeaderValueOmitted] != "2000000" {
		t.Errorf("tier record's routing headers %v", hs)
	}
	if _, ok := hs[HeaderAttempt]; ok {
		t.Errorf("x-attempt is set by Route, not copied: %v", hs)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// syncBuffer is a log sink the consumer's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHeaderValueAttrCutsAndQuotes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	v := "\n\x00" + strings.Repeat("é", 500_000)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", HeaderValueAttr("value", v))
	line := buf.String()
	if len(line) > 512 || strings.Count(line, "\n") != 1 || !strings.Contains(line, `"bytes":1000002`) {
		t.Errorf("log line of %d bytes: %.300s", len(line), line)
	}
}

// A 900 KB unreadable x-not-before on a tier record is logged as a short
// quoted prefix and its length, not verbatim.
func TestUnreadableHeaderIsNotLoggedVerbatim(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	huge := bytes.Repeat([]byte{0xff, 'A', '\n'}, 300_000)
	w := kafkatest.NewWriter(t, r.brokers, "retry.1")
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("k"), Value: []byte("v"),
		Headers: []kafkago.Header{{Key: HeaderNotBefore, Value: huge}}}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) { return order.OutcomeCharged, nil }}
	reader := newTestSource(t, kafkatest.FastReaderConfig(r.brokers, "g.retry.1", "retry.1"))
	pause := health.NewPause(&metrics.Outage{Paused: r.m.ConsumerPaused}, log)
	c := NewConsumer(reader, h, NewRouter(NewClientWriter(kafkatest.NewMessageWriter(t, r.brokers, "")), r.routes, r.m.Router(), pause, log), pause, r.m.Consumer(), log,
		Options{Tier: 1, CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	poll.Until(t, "the record handled", 15*time.Second, func() bool { return h.count("v") == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	_ = reader.Close()
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2048 {
			t.Errorf("log line of %d bytes: %.200s…", len(line), line)
		}
	}
	if !strings.Contains(logs.String(), `"bytes":900000`) {
		t.Errorf("the unreadable value's length is not logged: %.1000s", logs.String())
	}
}

// TestReplayMarkFollowsTheRecord: a replayed record routed to a tier keeps
// x-replayed-at, so its outcome on the tier is counted as a replay's too,
// and not observed in the delay SLI.
func TestReplayMarkFollowsTheRecord(t *testing.T) {
	t.Parallel()
	at := []byte("2026-12-05T10:00:00Z")
	msg := Record{Topic: "main", Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: HeaderReplayedAt, Value: at}}}
	for _, tier := range []int{0, 1} {
		hs := routedHeaders(msg, tier, "g", order.ClassTransient, errors.New("503"), time.Now())
		n := 0
		for _, h := range hs {
			if h.Key == HeaderReplayedAt && bytes.Equal(h.Value, at) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("tier %d: routed headers %v, want x-replayed-at once", tier, hs)
		}
	}
	if !replayed(Record{Headers: []Header{{Key: HeaderReplayedAt, Value: at}}}) || replayed(Record{Headers: []Header{{Key: HeaderReplayedAt, Value: []byte("yes")}}}) {
		t.Error("replayed(): want an RFC 3339 x-replayed-at only")
	}
}
