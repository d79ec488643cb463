package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// withSmallBatches sets BILLING_KAFKA_MAX_BATCH_BYTES to its least, 1 MiB,
// so that bombs of a few megabytes are over it in every codec (snappy
// compresses zeros only about 20 times: over 32 MiB it would not fit a
// broker's default 1 MiB message).
func withSmallBatches(c *config.Config) { c.KafkaMaxBatchBytes = config.MinKafkaMaxBatchBytes }

// TestBombsKfake: compression bombs on every partition at once, in every
// codec, among valid events, against the whole service (in process).
func TestBombsKfake(t *testing.T) {
	t.Parallel()
	bombsAmongEvents(t, newHarness(t, nil, withSmallBatches), false)
}

// TestBombsRealBroker: the same against Kafka 4.1.1 with its default
// configuration, which accepts such batches (a producer needs no more than
// write access to the topic), with one more zstd batch of a few kilobytes
// holding 256 MiB.
func TestBombsRealBroker(t *testing.T) {
	t.Parallel()
	bombsAmongEvents(t, newRealHarness(t, kafkatest.SharedReal(t).Brokers(), withSmallBatches), true)
}

// bombsAmongEvents writes to each partition of the main topic a valid
// event, two compressed batches over the bound (two codecs a partition, all
// four among them), and another valid event. Every event is billed, each
// record of a bomb reaches the DLQ as a stub of unknown size naming its
// batch, every offset is committed, and `dlq replay` skips the stubs,
// counting them.
func bombsAmongEvents(t *testing.T, h *harness, huge bool) {
	codecs := [][]kafkago.Compression{{kafkago.Gzip, kafkago.Snappy}, {kafkago.Lz4, kafkago.Zstd}, {kafkago.Zstd, kafkago.Gzip}}
	stubs := 0
	var orders []string
	for p, cs := range codecs {
		billed := func(name string) kafkatest.BatchRecord {
			id := fmt.Sprintf("ord-p%d-%s", p, name)
			orders = append(orders, id)
			_, m := event(t, id, "cus-1", 100)
			return kafkatest.BatchRecord{Key: m.Key, Value: m.Value}
		}
		kafkatest.ProduceBatch(t, h.brokers, h.cfg.KafkaTopic, p, 0, billed("before"))
		for _, codec := range cs {
			var bomb []kafkatest.BatchRecord
			for i := range 2 {
				bomb = append(bomb, kafkatest.BatchRecord{Key: fmt.Appendf(nil, "ord-p%d-%s-%d", p, codec, i), Zeros: 4 << 20})
			}
			kafkatest.ProduceBatch(t, h.brokers, h.cfg.KafkaTopic, p, codec, bomb...)
			stubs += len(bomb)
		}
		if huge && p == 0 {
			size := kafkatest.ProduceBatch(t, h.brokers, h.cfg.KafkaTopic, p, kafkago.Zstd, kafkatest.BatchRecord{Key: []byte("ord-huge"), Zeros: 256 << 20})
			t.Logf("the broker took a zstd batch of %d bytes holding 256 MiB", size)
			stubs++
		}
		kafkatest.ProduceBatch(t, h.brokers, h.cfg.KafkaTopic, p, 0, billed("after"))
	}
	for _, id := range orders {
		h.waitInvoice(id, "charged")
	}
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: h.brokers, ClientID: "bomb-test"})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "every offset committed", 60*time.Second, func() bool {
		lag, err := kc.Lag(context.Background(), h.cfg.KafkaGroupID, h.cfg.KafkaTopic)
		if err != nil || len(lag) != len(codecs) {
			return false
		}
		for _, l := range lag {
			if l != 0 {
				return false
			}
		}
		return true
	})
	if got := h.outcome("dead_lettered"); got != stubs {
		t.Errorf("dead_lettered %d, want %d", got, stubs)
	}
	if got := h.outcome("charged"); got != len(orders) {
		t.Errorf("charged %d, want %d", got, len(orders))
	}
	dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, stubs, 30*time.Second)
	for _, m := range dlq {
		hs := map[string]string{}
		for _, hd := range m.Headers {
			hs[hd.Key] = string(hd.Value)
		}
		if len(m.Value) != 0 || hs[kafkain.HeaderValueOmitted] != kafkain.ValueOmittedUnknown ||
			!strings.Contains(hs[kafkain.HeaderError], "decompresses to more than 1048576 bytes") ||
			!strings.Contains(hs[kafkain.HeaderError], h.cfg.KafkaTopic+"/"+hs[kafkain.HeaderOriginalPartition]+":") {
			t.Errorf("DLQ record: value %d bytes, headers %v; want a stub of unknown size naming its batch", len(m.Value), hs)
		}
	}
	res, err := kafkain.Replay(context.Background(), kc, h.cfg.KafkaDLQTopic, h.cfg.KafkaTopic,
		kafkain.ReplayOptions{DryRun: true, MaxBatchBytes: int(h.cfg.KafkaMaxBatchBytes)}, slog.New(slog.DiscardHandler))
	if err != nil || res != (kafkain.ReplayResult{Skipped: stubs}) {
		t.Errorf("dlq replay --dry-run = %+v, %v; want every stub skipped (%d)", res, err, stubs)
	}
}
