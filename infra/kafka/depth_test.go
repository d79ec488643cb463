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
