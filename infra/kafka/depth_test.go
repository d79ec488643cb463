package kafkaclient_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// TestRecordsSumsPartitions: the DLQ depth is every record of every
// partition, read from the brokers, and an unknown topic is an error rather
// than a depth of zero (which would resolve an alert on it).
func TestRecordsSumsPartitions(t *testing.T) {
	const topic = "billing.order-confirmed.dlq"
	cl := kafkatest.NewFake(t, kafkatest.WithTopics(3, topic))
	w := kafkatest.NewWriter(t, cl.Brokers(), topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []kafkago.Message
	for i := range 7 {
		msgs = append(msgs, kafkago.Message{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
	conn, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: cl.Brokers(), ClientID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := conn.Records(ctx, topic)
	if err != nil || n != 7 {
		t.Errorf("Records(%s): got %d, %v; want 7, nil", topic, n, err)
	}
	if n, err := conn.Records(ctx, "no.such.topic"); err == nil {
		t.Errorf("Records(no.such.topic): got %d, nil; want an error", n)
	}
}

// TestOffsets: each partition's log start and end, of every partition or
// of the ones asked for; a partition the topic lacks is an error.
func TestOffsets(t *testing.T) {
	t.Parallel()
	const topic = "offsets"
	cl := kafkatest.NewFake(t, kafkatest.WithTopics(2, topic))
	w := kafkatest.NewWriter(t, cl.Brokers(), topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: cl.Brokers(), ClientID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ends := kafkatest.EndOffsets(t, cl.Brokers(), topic)
	all, err := kc.Offsets(ctx, topic)
	if err != nil || len(all) != 2 || all[0].Partition != 0 || all[1].Partition != 1 {
		t.Fatalf("Offsets(%s) = %+v, %v; want partitions 0 and 1", topic, all, err)
	}
	var n int64
	for _, p := range all {
		if p.First != 0 || p.End != ends[p.Partition] {
			t.Errorf("partition %d: %+v, want [0, %d)", p.Partition, p, ends[p.Partition])
		}
		n += p.End
	}
	if n != 5 {
		t.Errorf("%d records in all, want 5", n)
	}
	one, err := kc.Offsets(ctx, topic, 1)
	if err != nil || len(one) != 1 || one[0] != all[1] {
		t.Errorf("Offsets(%s, 1) = %+v, %v; want %+v", topic, one, err, all[1])
	}
	if got, err := kc.Offsets(ctx, topic, 7); err == nil {
		t.Errorf("Offsets(%s, 7) = %+v; want an error", topic, got)
	}
}
