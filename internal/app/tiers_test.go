package app

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// BILLING_RETRY_DELAYS was shortened from three tiers to two while a record
// waited in tier 3: the record is still consumed, as the last tier, billed,
// and its offset committed by the group of tier 3 (docs/interface.md §2).
func TestRecordLeftInRemovedTierIsBilled(t *testing.T) {
	t.Parallel()
	_, msg := event(t, "ord-stranded", "cus-1", 1500)
	const tier3 = "billing.retry.3"
	h := newHarness(t, nil, func(cfg *config.Config) {
		kafkatest.CreateTopics(t, cfg.KafkaBrokers, 3, tier3)
		msg.Headers = []kafkago.Header{
			{Key: "x-original-topic", Value: []byte(testTopic)}, {Key: "x-original-partition", Value: []byte("0")},
			{Key: "x-original-offset", Value: []byte("7")}, {Key: "x-attempt", Value: []byte("3")},
			{Key: "x-not-before", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := kafkatest.NewWriter(t, cfg.KafkaBrokers, tier3).WriteMessages(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if len(cfg.RetryDelays) != 2 {
			t.Fatalf("test config has %d delays, want 2", len(cfg.RetryDelays))
		}
	})
	h.waitInvoice("ord-stranded", order.StatusCharged)
	kafkatest.WaitCommitted(t, h.brokers, h.cfg.KafkaGroupID+".retry.3", tier3, 15*time.Second)
}
