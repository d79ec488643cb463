package kafkaclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// javaMurmur2 vectors: key → Utils.murmur2(key) as the Java client computes
// it, from Apache Kafka's UtilsTest.testMurmur2 (clients module).
var javaMurmur2 = map[string]int32{
	"21":                         -973932308,
	"foobar":                     -790332482,
	"a-little-bit-long-string":   -985981536,
	"a-little-bit-longer-string": -1486304829,
	"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	"abc": 479470107,
}

// murmur2 is Kafka's Utils.murmur2, written here from its definition
// (MurmurHash2, seed 0x9747b28c, little-endian 4-byte blocks) rather than
// taken from kafka-go, so the test does not check kafka-go against itself.
func murmur2(data []byte) int32 {
	const m, r = uint32(0x5bd1e995), 24
	h := uint32(0x9747b28c) ^ uint32(len(data))
	n := len(data) / 4 * 4
	for i := 0; i < n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) - n {
	case 3:
		h ^= uint32(data[n+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[n+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[n])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// javaPartition is the Java client's choice for a keyed record
// (BuiltInPartitioner.partitionForKey): toPositive(murmur2(key)) % n.
func javaPartition(key []byte, n int) int {
	return int(uint32(murmur2(key))&0x7fffffff) % n
}

func TestMurmur2MatchesJavaVectors(t *testing.T) {
	t.Parallel()
	for k, want := range javaMurmur2 {
		if got := murmur2([]byte(k)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", k, got, want)
		}
	}
}

// Records written by the routing writer (retry tiers, DLQ, dlq replay)
// land on the partition the Java client picks for their key.
func TestWriterPartitionsLikeTheJavaClient(t *testing.T) {
	t.Parallel()
	const parts = 12
	c := kafkatest.NewFake(t)
	topic := "tier"
	kafkatest.CreateTopics(t, c.Brokers(), parts, topic)
	w, closeW := conn(t, c.Brokers()).NewWriter()
	defer func() {
		if err := closeW(); err != nil {
			t.Error(err)
		}
	}()
	var keys []string
	for k := range javaMurmur2 {
		keys = append(keys, k)
	}
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("ord-%d", i))
	}
	var msgs []kafkaclient.Message
	for _, k := range keys {
		msgs = append(msgs, kafkaclient.Message{Topic: topic, Key: []byte(k), Value: []byte(k)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	for _, m := range kafkatest.ReadAll(t, c.Brokers(), topic, len(keys), 15*time.Second) {
		if want := javaPartition(m.Key, parts); m.Partition != want {
			t.Errorf("key %q on partition %d, the Java client picks %d", m.Key, m.Partition, want)
		}
	}
}
