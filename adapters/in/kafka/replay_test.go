package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// replayCount is Replay's count of the records it replayed.
func replayCount(ctx context.Context, kc *kafkaclient.Cluster, dlq, topic string, o ReplayOptions, log *slog.Logger) (int, error) {
	r, err := Replay(ctx, kc, dlq, topic, o, log)
	return r.Replayed, err
}

func newConn(t *testing.T, brokers []string) *kafkaclient.Cluster {
	t.Helper()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "replay-test"})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func write(t *testing.T, brokers []string, topic string, msgs ...kafkago.Message) {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: topic, Transport: tr, Balancer: &kafkago.Murmur2Balancer{}, // the service writer's partitioner
		BatchBytes: 8 << 20, BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireAll}
	defer w.Close()
	for _, m := range msgs { // one by one: a 2-partition DLQ keeps their order per key
		if err := w.WriteMessages(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func routed(key string, value []byte, extra ...kafkago.Header) kafkago.Message {
	hs := []kafkago.Header{{Key: "traceparent", Value: []byte("tp-" + key)},
		{Key: HeaderOriginalTopic, Value: []byte("main")}, {Key: HeaderOriginalPartition, Value: []byte("0")},
		{Key: HeaderOriginalOffset, Value: []byte("0")}, {Key: HeaderAttempt, Value: []byte("0")},
		{Key: HeaderErrorClass, Value: []byte("permanent")}, {Key: HeaderError, Value: []byte("bad")},
		{Key: HeaderFailedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
		{Key: HeaderConsumerGroup, Value: []byte("g")}}
	return kafkago.Message{Key: []byte(key), Value: value, Headers: append(hs, extra...)}
}

// Records of a key come back in their DLQ order, on the key's murmur2
// partition, with their own headers and without the routing headers, even
// when large records split the batches.
func TestReplayKeepsOrderInBoundedBatches(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t, kafkatest.WithKfake(kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8388608"})))
	kafkatest.CreateTopics(t, c.Brokers(), 2, "main", "dlq")
	var in []kafkago.Message
	for i := range 30 {
		v := []byte(strconv.Itoa(i))
		if i%4 == 1 {
			v = append(v, bytes.Repeat([]byte("x"), 600_000)...) // crosses the batch bound often
		}
		if i == 7 {
			v = append(v, bytes.Repeat([]byte("y"), 1_500_000)...) // written alone
		}
		var extra []kafkago.Header
		if i == 3 {
			// Dead-lettered again after an earlier replay: that replay's
			// mark is replaced by this one's.
			extra = append(extra, kafkago.Header{Key: HeaderReplayedAt, Value: []byte("2026-01-01T00:00:00Z")})
		}
		in = append(in, routed("k"+strconv.Itoa(i%3), v, extra...))
	}
	write(t, c.Brokers(), "dlq", in...)

	started := time.Now().Truncate(time.Second)
	n, err := replayCount(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, quiet())
	if err != nil || n != len(in) {
		t.Fatalf("Run = %d, %v; want %d", n, err, len(in))
	}
	// A generous bound: under -race on a busy 2-core machine, reading back
	// megabyte records took longer than 15 s twice.
	out := kafkatest.ReadAll(t, c.Brokers(), "main", len(in), time.Minute)
	last := map[string]int{}
	for _, m := range out {
		seq, _ := strconv.Atoi(string(bytes.TrimRight(bytes.TrimRight(m.Value, "x"), "y")))
		if prev, ok := last[string(m.Key)]; ok && seq <= prev {
			t.Errorf("key %s: record %d after %d", m.Key, seq, prev)
		}
		last[string(m.Key)] = seq
		// The record's own headers, and the replay's mark (docs/interface.md §1),
		// which the consumer counts apart from the delay SLI.
		if len(m.Headers) != 2 || m.Headers[0].Key != "traceparent" || m.Headers[1].Key != HeaderReplayedAt {
			t.Errorf("replayed headers %v, want the record's own and x-replayed-at", m.Headers)
			continue
		}
		if at, err := time.Parse(time.RFC3339, string(m.Headers[1].Value)); err != nil || at.Before(started) || at.After(time.Now()) {
			t.Errorf("x-replayed-at %q (%v), want this replay's time, RFC 3339", m.Headers[1].Value, err)
		}
	}
}

// A DLQ stub (x-value-omitted) is replayed from the original it names; one
// whose original is not there is skipped, not replayed empty.
func TestReplayStubFromItsOriginal(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "main", "dlq")
	write(t, c.Brokers(), "main", kafkago.Message{Key: []byte("k"), Value: []byte("the original"),
		Headers: []kafkago.Header{{Key: "h", Value: []byte("1")}}})
	stub := routed("k", []byte{}, kafkago.Header{Key: HeaderValueOmitted, Value: []byte("12")})
	lost := routed("gone", []byte{}, kafkago.Header{Key: HeaderValueOmitted, Value: []byte("12")})
	write(t, c.Brokers(), "dlq", stub, lost)

	n, err := replayCount(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, quiet())
	if err != nil || n != 1 {
		t.Fatalf("Run = %d, %v; want 1 (the stub whose original is there)", n, err)
	}
	out := kafkatest.ReadAll(t, c.Brokers(), "main", 2, 15*time.Second)
	if got := out[1]; string(got.Value) != "the original" || string(got.Key) != "k" || len(got.Headers) != 2 ||
		got.Headers[0].Key != "h" || got.Headers[1].Key != HeaderReplayedAt {
		t.Errorf("replayed %q %q %v, want the original record, marked replayed", got.Key, got.Value, got.Headers)
	}
}

func TestOriginalDropsValueOmitted(t *testing.T) {
	t.Parallel()
	m := originalOf(recordOf(routed("k", nil, kafkago.Header{Key: HeaderValueOmitted, Value: []byte("9")})), "main")
	if len(m.Headers) != 1 || m.Headers[0].Key != "traceparent" {
		t.Errorf("headers %v", m.Headers)
	}
}

// A DLQ stub whose x-original-partition is -1 must not panic replay
// (kafka-go's NewReader panics on a negative partition).
func TestReplayStubWithNegativePartitionDoesNotPanic(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "main", "dlq")
	write(t, c.Brokers(), "main", kafkago.Message{Key: []byte("k"), Value: []byte("the original")})
	stub := routed("k", []byte{}, kafkago.Header{Key: HeaderValueOmitted, Value: []byte("12")})
	for i, h := range stub.Headers {
		if h.Key == HeaderOriginalPartition {
			stub.Headers[i].Value = []byte("-1")
		}
	}
	write(t, c.Brokers(), "dlq", stub)
	n, err := replayCount(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, quiet())
	if err != nil || n != 0 {
		t.Fatalf("Run = %d, %v; want 0 replayed, the stub skipped", n, err)
	}
}

// stubAt is a DLQ stub (x-value-omitted) of key whose x-original-* headers
// say topic, partition and offset.
func stubAt(key, topic, partition, offset string) kafkago.Message {
	m := routed(key, []byte{}, kafkago.Header{Key: HeaderValueOmitted, Value: []byte("12")})
	for i, h := range m.Headers {
		switch h.Key {
		case HeaderOriginalTopic:
			m.Headers[i].Value = []byte(topic)
		case HeaderOriginalPartition:
			m.Headers[i].Value = []byte(partition)
		case HeaderOriginalOffset:
			m.Headers[i].Value = []byte(offset)
		}
	}
	return m
}

// Replay reads a stub's original only from the main topic or a configured
// retry tier, at a partition that exists and an offset that is one; every
// other stub is skipped, counted and logged, and replay goes on.
func TestReplayTrustsNoOrigin(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 2, "main", "dlq", "main.retry.1", "payroll")
	// Partition 0 of each readable topic holds one record of key "k" (the
	// partitioner puts "k" where it puts it; the stubs name that partition).
	own := kafkago.Message{Key: []byte("k"), Value: []byte("the original")}
	write(t, c.Brokers(), "main", own)
	write(t, c.Brokers(), "main.retry.1", kafkago.Message{Key: []byte("k"), Value: []byte("from the tier")})
	write(t, c.Brokers(), "payroll", kafkago.Message{Key: []byte("k"), Value: []byte("someone else's secret")})
	part := strconv.Itoa(kafkatest.ReadAll(t, c.Brokers(), "main", 1, 15*time.Second)[0].Partition)
	other := strconv.Itoa(1 - mustAtoi(t, part))

	good := []kafkago.Message{stubAt("k", "main", part, "0"), stubAt("k", "main.retry.1", part, "0")}
	bad := []kafkago.Message{
		stubAt("k", "payroll", part, "0"),      // readable, but not ours to replay
		stubAt("k", "dlq", part, "0"),          // the DLQ itself
		stubAt("k", "", part, "0"),             // no topic
		stubAt("k", "main.retry.2", part, "0"), // not a configured tier
		stubAt("k", "main", "-1", "0"),         // kafka-go panics on it
		stubAt("k", "main", "2", "0"),          // no such partition
		stubAt("k", "main", "2147483648", "0"), // not even an int32
		stubAt("k", "main", " 0", "0"),
		stubAt("k", "main", "zero", "0"),
		stubAt("k", "main", part, "-2"), // kafka-go's "first offset"
		stubAt("k", "main", part, "x"),
		stubAt("k", "main", other, "0"), // an empty partition: nothing there
		stubAt("k", "main", part, "7"),  // past the end
	}
	write(t, c.Brokers(), "dlq", append(append([]kafkago.Message{}, bad[:6]...), append(good, bad[6:]...)...)...)

	o := ReplayOptions{Tiers: []string{"main.retry.1"}}
	dry, err := Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{Tiers: o.Tiers, DryRun: true}, quiet())
	if err != nil || dry != (ReplayResult{Replayed: len(good), Skipped: len(bad)}) {
		t.Fatalf("dry run = %+v, %v; want %d replayed, %d skipped", dry, err, len(good), len(bad))
	}
	var logs syncbuf.Buffer
	got, err := Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", o, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil || got != (ReplayResult{Replayed: len(good), Skipped: len(bad)}) {
		t.Fatalf("Replay = %+v, %v; want %d replayed, %d skipped", got, err, len(good), len(bad))
	}
	if n := strings.Count(logs.String(), "dlq record without its value skipped"); n != len(bad) {
		t.Errorf("%d skip lines logged, want one per skipped record (%d):\n%s", n, len(bad), logs.String())
	}
	out := kafkatest.ReadAll(t, c.Brokers(), "main", 1+len(good), 15*time.Second)
	var values []string
	for _, m := range out[1:] {
		values = append(values, string(m.Value))
	}
	if want := []string{"the original", "from the tier"}; !slices.Equal(values, want) {
		t.Errorf("replayed %q, want %q", values, want)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A stub whose original carries more headers than the service reads (a
// header flood: the consumer dead-lettered it as a stub) is skipped: a copy
// would not be the original.
func TestReplaySkipsAFloodedOriginal(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "main", "dlq")
	flood := kafkago.Message{Key: []byte("k"), Value: []byte("flooded")}
	for range kafkago.MaxRecordHeaders + 1 {
		flood.Headers = append(flood.Headers, kafkago.Header{Key: "h"})
	}
	write(t, c.Brokers(), "main", flood)
	write(t, c.Brokers(), "dlq", stubAt("k", "main", "0", "0"))
	var logs syncbuf.Buffer
	got, err := Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil || got != (ReplayResult{Skipped: 1}) {
		t.Fatalf("Replay = %+v, %v; want the stub skipped", got, err)
	}
	if !strings.Contains(logs.String(), "more than the 4096 a record may carry") {
		t.Errorf("log does not say why:\n%s", logs.String())
	}
}

// A DLQ stub of unknown size stands for a record of a compressed batch the
// service never decoded (docs/interface.md §5): it is skipped and counted, the rest
// is replayed.
func TestReplaySkipsStubsOfBatchesNotDecoded(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "main", "dlq")
	unknown := func(offset string) kafkago.Message {
		m := stubAt("", "main", "0", offset)
		m.Key = nil
		for i, h := range m.Headers {
			if h.Key == HeaderValueOmitted {
				m.Headers[i].Value = []byte(ValueOmittedUnknown)
			}
		}
		return m
	}
	write(t, c.Brokers(), "dlq", unknown("1"), routed("k", []byte("bad")), unknown("2"))
	var logs syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	dry, err := Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{DryRun: true}, log)
	if err != nil || dry != (ReplayResult{Replayed: 1, Skipped: 2}) {
		t.Fatalf("dry run = %+v, %v; want 1 replayed, 2 skipped", dry, err)
	}
	got, err := Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, log)
	if err != nil || got != (ReplayResult{Replayed: 1, Skipped: 2}) {
		t.Fatalf("Replay = %+v, %v; want 1 replayed, 2 skipped", got, err)
	}
	if out := kafkatest.ReadAll(t, c.Brokers(), "main", 1, 15*time.Second); len(out) != 1 || string(out[0].Value) != "bad" {
		t.Errorf("main holds %d records, want only the one replayed", len(out))
	}
	if !strings.Contains(logs.String(), "never decoded") {
		t.Errorf("log does not say why:\n%s", logs.String())
	}
}

// A DLQ record with 4096 headers of its own, besides the routing headers,
// comes back whole: the replay decodes them all (docs/interface.md §5), and adds
// only its own x-replayed-at, which is not the record's.
func TestReplayRecordOf4096Headers(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "main", "dlq")
	var own []kafkago.Header
	for i := range MaxRecordHeaders - 1 {
		own = append(own, kafkago.Header{Key: "h" + strconv.Itoa(i%7), Value: []byte{byte(i)}})
	}
	m := routed("k", []byte("event"), append(own, kafkago.Header{Key: HeaderNotBefore, Value: []byte("x")})...)
	write(t, c.Brokers(), "dlq", m)
	n, err := replayCount(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, quiet())
	if err != nil || n != 1 {
		t.Fatalf("Run = %d, %v; want 1", n, err)
	}
	out := kafkatest.ReadAll(t, c.Brokers(), "main", 1, 15*time.Second)[0]
	if string(out.Value) != "event" || len(out.Headers) != MaxRecordHeaders+1 || out.Headers[0].Key != "traceparent" ||
		out.Headers[len(out.Headers)-1].Key != HeaderReplayedAt {
		t.Errorf("replayed %q with %d headers (first %v), want its value and its %d own headers", out.Value, len(out.Headers),
			out.Headers[:min(1, len(out.Headers))], MaxRecordHeaders)
	}
}

// A DLQ record with more headers of its own than a record may carry
// (someone else's write: the service dead-letters such a record as a stub)
// is skipped, counted and logged: the consumer would only dead-letter it
// again.
func TestReplaySkipsARecordOfTooManyHeaders(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "main", "dlq")
	var own []kafkago.Header
	for range MaxRecordHeaders + 1 { // besides the traceparent routed adds
		own = append(own, kafkago.Header{Key: "h"})
	}
	write(t, c.Brokers(), "dlq", routed("flood", []byte("event"), own...), routed("k", []byte("bad")))
	var logs syncbuf.Buffer
	got, err := Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", ReplayOptions{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil || got != (ReplayResult{Replayed: 1, Skipped: 1}) {
		t.Fatalf("Replay = %+v, %v; want the flooded record skipped, the other replayed", got, err)
	}
	if out := kafkatest.ReadAll(t, c.Brokers(), "main", 1, 15*time.Second); len(out) != 1 || string(out[0].Key) != "k" {
		t.Errorf("main holds %d records, want only k's", len(out))
	}
	if !strings.Contains(logs.String(), "4098 headers of its own") {
		t.Errorf("log does not say why:\n%s", logs.String())
	}
}
