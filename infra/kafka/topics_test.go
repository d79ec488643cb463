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

func TestMain(m *testing.M) { kafkatest.Main(m) }

func conn(t *testing.T, brokers []string) *kafkaclient.Cluster {
	t.Helper()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "billing-test"})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func create(t *testing.T, brokers []string, topic string, maxBytes int) {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: 30 * time.Second}
	tc := kafkago.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}
	if maxBytes > 0 {
		tc.ConfigEntries = []kafkago.ConfigEntry{{ConfigName: kafkaclient.MaxMessageBytesConfig, ConfigValue: strconv.Itoa(maxBytes)}}
	}
	res, err := cl.CreateTopics(context.Background(), &kafkago.CreateTopicsRequest{Topics: []kafkago.TopicConfig{tc}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// Tier and DLQ topics that exist with Kafka's default 1 MiB limit are
// raised to what routed records from the main topic need; a missing one is
// created with it; one already above it is left alone (docs/interface.md §5).
func TestEnsureTopicsRaisesMaxMessageBytes(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.SharedReal(t).Brokers()
	kc := conn(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	main, old, missing, big := kafkatest.UniqueName(t, "main"), kafkatest.UniqueName(t, "dlq"),
		kafkatest.UniqueName(t, "tier"), kafkatest.UniqueName(t, "big")
	create(t, brokers, main, 10<<20)
	create(t, brokers, old, 1<<20)
	create(t, brokers, big, 64<<20)

	mainMax, err := kc.MaxMessageBytes(ctx, main)
	if err != nil || mainMax != 10<<20 {
		t.Fatalf("MaxMessageBytes(main) = %d, %v; want %d", mainMax, err, 10<<20)
	}
	least := kafkaclient.RoutedMaxMessageBytes(mainMax)
	if least <= mainMax {
		t.Fatalf("RoutedMaxMessageBytes(%d) = %d leaves no room for headers", mainMax, least)
	}
	specs := []kafkaclient.TopicSpec{{Name: old, Partitions: 1, MinMaxMessageBytes: least},
		{Name: missing, Partitions: 1, MinMaxMessageBytes: least}, {Name: big, Partitions: 1, MinMaxMessageBytes: least}}
	if err := kc.EnsureTopics(ctx, specs); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	for topic, want := range map[string]int{old: least, missing: least, big: 64 << 20} {
		got, err := kc.MaxMessageBytes(ctx, topic)
		if err != nil || got != want {
			t.Errorf("max.message.bytes of %s = %d, %v; want %d", topic, got, err, want)
		}
	}
}

// A topic without its own setting reports the broker's default.
func TestMaxMessageBytesOfBrokerDefault(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.SharedReal(t).Brokers()
	topic := kafkatest.UniqueName(t, "main")
	create(t, brokers, topic, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := conn(t, brokers).MaxMessageBytes(ctx, topic)
	if err != nil || got < 1<<20 {
		t.Errorf("MaxMessageBytes = %d, %v; want the broker's default (1 MiB and a little)", got, err)
	}
}

// TierTopics finds <prefix>.N topics and nothing that only looks like one.
func TestTierTopics(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "r.1", "r.3", "r.12", "r.0", "r.x", "r.01", "rr.2", "r.2.dlq", "main")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := conn(t, c.Brokers()).TierTopics(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{1: "r.1", 3: "r.3", 12: "r.12"}
	if len(got) != len(want) {
		t.Errorf("TierTopics = %v, want %v", got, want)
	}
	for n, topic := range want {
		if got[n] != topic {
			t.Errorf("tier %d = %q, want %q", n, got[n], topic)
		}
	}
}
