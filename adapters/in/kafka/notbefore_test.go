package kafka

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// A tier honours x-not-before only up to its own delay from when it reads
// the record: a far-future or unreadable value must not hold the record,
// its slot and its partition's commits (docs/interface.md §5).
func TestTierClampsNotBefore(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) { return order.OutcomeCharged, nil }}
	w := kafkatest.NewWriter(t, r.brokers, "retry.1")
	err := w.WriteMessages(context.Background(),
		kafkago.Message{Key: []byte("far"), Value: []byte("far"), Headers: []kafkago.Header{{Key: HeaderNotBefore, Value: []byte("9999-12-31T23:59:59Z")}}},
		kafkago.Message{Key: []byte("junk"), Value: []byte("junk"), Headers: []kafkago.Header{{Key: HeaderNotBefore, Value: []byte("not a time")}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, 1, "retry.1", "g.retry.1", h, kafkatest.NewMessageWriter(t, r.brokers, ""))
	// The tier's delay is 100ms; the deadline only bounds a failing run.
	poll.Until(t, "both records handled", 15*time.Second, func() bool { return h.count("far") == 1 && h.count("junk") == 1 })
	kafkatest.WaitCommitted(t, r.brokers, "g.retry.1", "retry.1", 15*time.Second)
}
