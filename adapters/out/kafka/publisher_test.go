package kafkapub_test

import (
	"testing"
	"time"

	kafkapub "github.com/acme/billing/adapters/out/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/publishertest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// harness is the publisher the service builds (infra/kafka's writer,
// acknowledged by all in-sync replicas, murmur2 on the key) on a topic of
// its own of brokers, three partitions.
func harness(t *testing.T, brokers []string) publishertest.Harness {
	t.Helper()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "publisher-test"})
	if err != nil {
		t.Fatal(err)
	}
	w, closeW := kc.NewWriter()
	t.Cleanup(func() {
		if err := closeW(); err != nil {
			t.Errorf("close the writer: %v", err)
		}
	})
	topic := kafkatest.UniqueName(t, "invoices")
	kafkatest.CreateTopics(t, brokers, 3, topic)
	return publishertest.Harness{
		Publisher:  kafkapub.NewPublisher(w, topic),
		Unwritable: kafkapub.NewPublisher(w, kafkatest.UniqueName(t, "absent")),
		Read: func(t *testing.T, n int) []publishertest.Record {
			t.Helper()
			var out []publishertest.Record
			for _, m := range kafkatest.ReadAll(t, brokers, topic, n, time.Minute) {
				r := publishertest.Record{Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value}
				for _, h := range m.Headers {
					r.Headers = append(r.Headers, publishertest.Header{Key: h.Key, Value: h.Value})
				}
				out = append(out, r)
			}
			return out
		},
	}
}

// TestPublisherContractKfake runs order.EventPublisher's contract on the
// in-process broker, a broker of its own per scenario.
func TestPublisherContractKfake(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) publishertest.Harness { return harness(t, kafkatest.NewFake(t).Brokers()) })
}

// TestPublisherContractReal runs it on the real broker (one for the
// package), whose acknowledgements and partitioning are the ones that
// matter.
func TestPublisherContractReal(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) publishertest.Harness { return harness(t, kafkatest.SharedReal(t).Brokers()) })
}
