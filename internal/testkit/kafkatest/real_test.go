package kafkatest_test

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/testkit/kafkatest"
)

// The real-broker tests check the helpers, and kafka-go v0.4.51 itself,
// against Apache Kafka: topic creation through the controller, RequireAll
// writes, group consumption over 6 partitions and offset commits.

func TestRealGroupConsumption(t *testing.T) {
	t.Parallel()
	c := kafkatest.SharedReal(t)
	roundTrip(t, c.Brokers(), 6, 100)
}

func TestRealSharedIsShared(t *testing.T) {
	t.Parallel()
	a, b := kafkatest.SharedReal(t), kafkatest.SharedReal(t)
	if a.Brokers()[0] != b.Brokers()[0] {
		t.Fatalf("SharedReal gave %v and %v", a.Brokers(), b.Brokers())
	}
	if a.Fake() != nil {
		t.Fatal("a real cluster reports a kfake cluster")
	}
}

// A broker of a test's own (NewReal) serves a round trip, and stopped and
// restarted it keeps its address and its data: the records written before
// the stop are read after it, and the group's committed offsets are still
// there (the e2e suite's broker-restart test stops its broker mid-stream
// this way). One test for both, since each broker start costs seconds of
// CPU.
func TestRealRestart(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewReal(t)
	roundTrip(t, c.Brokers(), 2, 10)
	topic, group := kafkatest.UniqueName(t, "kept"), kafkatest.UniqueName(t, "g")
	kafkatest.CreateTopics(t, c.Brokers(), 1, topic)
	w := kafkatest.NewWriter(t, c.Brokers(), topic)
	if err := w.WriteMessages(context.Background(), kafkago.Message{Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	r := kafkago.NewReader(kafkatest.FastReaderConfig(c.Brokers(), group, topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := r.FetchMessage(ctx)
	if err == nil {
		err = r.CommitMessages(ctx, m)
	}
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	c.StopBroker(t)
	c.RestartBroker(t)
	if got := kafkatest.ReadAll(t, c.Brokers(), topic, 1, 30*time.Second); len(got) != 1 || string(got[0].Value) != "before" {
		t.Fatalf("after the restart the topic holds %d records, want the one written before", len(got))
	}
	if got := kafkatest.CommittedOffsets(t, c.Brokers(), group, topic)[0]; got != 1 {
		t.Errorf("committed offset after the restart = %d, want 1", got)
	}
	roundTrip(t, c.Brokers(), 2, 10)
}
