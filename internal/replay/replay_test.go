package replay_test

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

	kafkain "github.com/acme/billing/adapters/in/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/replay"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

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
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: topic, Transport: tr, Balancer: kafkaclient.Partitioner(),
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
		{Key: kafkain.HeaderOriginalTopic, Value: []byte("main")}, {Key: kafkain.HeaderOriginalPartition, Value: []byte("0")},
		{Key: kafkain.HeaderOriginalOffset, Value: []byte("0")}, {Key: kafkain.HeaderAttempt, Value: []byte("0")},
		{Key: kafkain.HeaderErrorClass, Value: []byte("permanent")}, {Key: kafkain.HeaderError, Value: []byte("bad")},
		{Key: kafkain.HeaderFailedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
		{Key: kafkain.HeaderConsumerGroup, Value: []byte("g")}}
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
		in = append(in, routed("k"+strconv.Itoa(i%3), v))
	}
	write(t, c.Brokers(), "dlq", in...)

	n, err := replay.Run(context.Background(), newConn(t, c.Brokers()), "dlq", "main", replay.Options{}, quiet())
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
		if len(m.Headers) != 1 || m.Headers[0].Key != "traceparent" {
			t.Errorf("replayed headers %v, want only the record's own", m.Headers)
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
	stub := routed("k", []byte{}, kafkago.Header{Key: kafkain.HeaderValueOmitted, Value: []byte("12")})
	lost := routed("gone", []byte{}, kafkago.Header{Key: kafkain.HeaderValueOmitted, Value: []byte("12")})
	write(t, c.Brokers(), "dlq", stub, lost)

	n, err := replay.Run(context.Background(), newConn(t, c.Brokers()), "dlq", "main", replay.Options{}, quiet())
	if err != nil || n != 1 {
		t.Fatalf("Run = %d, %v; want 1 (the stub whose original is there)", n, err)
	}
	out := kafkatest.ReadAll(t, c.Brokers(), "main", 2, 15*time.Second)
	if got := out[1]; string(got.Value) != "the original" || string(got.Key) != "k" || len(got.Headers) != 1 {
		t.Errorf("replayed %q %q %v, want the original record", got.Key, got.Value, got.Headers)
	}
}

func TestOriginalDropsValueOmitted(t *testing.T) {
	t.Parallel()
	m := replay.Original(routed("k", nil, kafkago.Header{Key: kafkain.HeaderValueOmitted, Value: []byte("9")}), "main")
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
	stub := routed("k", []byte{}, kafkago.Header{Key: kafkain.HeaderValueOmitted, Value: []byte("12")})
	for i, h := range stub.Headers {
		if h.Key == kafkain.HeaderOriginalPartition {
			stub.Headers[i].Value = []byte("-1")
		}
	}
	write(t, c.Brokers(), "dlq", stub)
	n, err := replay.Run(context.Background(), newConn(t, c.Brokers()), "dlq", "main", replay.Options{}, quiet())
	if err != nil || n != 0 {
		t.Fatalf("Run = %d, %v; want 0 replayed, the stub skipped", n, err)
	}
}

// stubAt is a DLQ stub (x-value-omitted) of key whose x-original-* headers
// say topic, partition and offset.
func stubAt(key, topic, partition, offset string) kafkago.Message {
	m := routed(key, []byte{}, kafkago.Header{Key: kafkain.HeaderValueOmitted, Value: []byte("12")})
	for i, h := range m.Headers {
		switch h.Key {
		case kafkain.HeaderOriginalTopic:
			m.Headers[i].Value = []byte(topic)
		case kafkain.HeaderOriginalPartition:
			m.Headers[i].Value = []byte(partition)
		case kafkain.HeaderOriginalOffset:
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

	o := replay.Options{Tiers: []string{"main.retry.1"}}
	dry, err := replay.Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", replay.Options{Tiers: o.Tiers, DryRun: true}, quiet())
	if err != nil || dry != (replay.Result{Replayed: len(good), Skipped: len(bad)}) {
		t.Fatalf("dry run = %+v, %v; want %d replayed, %d skipped", dry, err, len(good), len(bad))
	}
	var logs syncbuf.Buffer
	got, err := replay.Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", o, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil || got != (replay.Result{Replayed: len(good), Skipped: len(bad)}) {
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
	got, err := replay.Replay(context.Background(), newConn(t, c.Brokers()), "dlq", "main", replay.Options{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil || got != (replay.Result{Skipped: 1}) {
		t.Fatalf("Replay = %+v, %v; want the stub skipped", got, err)
	}
	if !strings.Contains(logs.String(), "more than the 4096 the service reads") {
		t.Errorf("log does not say why:\n%s", logs.String())
	}
}
