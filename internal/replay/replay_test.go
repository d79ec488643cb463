package replay_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/kafkatest"
	"github.com/acme/billing/internal/replay"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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
