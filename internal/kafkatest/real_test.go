package kafkatest_test

import (
	"testing"

	"github.com/acme/billing/internal/kafkatest"
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

func TestNewReal(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewReal(t)
	roundTrip(t, c.Brokers(), 1, 10)
}
