package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// A gateway refusing the charge for good (400) leaves no money moved: the
// invoice becomes rejected and the record goes to the DLQ at once (no retry
// tier). Once the cause is fixed, the replay of that record reopens the
// invoice under the same key and charges it, once (docs/interface.md §4).
func TestGateway400RejectedThenReplayCharges(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	fixed := make(chan struct{})
	gw.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
		select {
		case <-fixed:
			return gatewaystub.Fault{}
		default:
			return gatewaystub.Fault{Status: 400}
		}
	})
	h := newHarness(t, gw, nil)
	e, m := event(t, "ord-refused", "cus-1", 4321)
	h.send(m)
	dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, 1, 15*time.Second)
	if hs := headers(dlq[0]); hs["x-error-class"] != "permanent" || hs["x-attempt"] != "0" {
		t.Errorf("DLQ headers %v, want a permanent error from the main topic", hs)
	}
	inv := h.waitInvoice("ord-refused", order.StatusRejected)
	if inv.EventID != e.EventID || inv.ChargeID != "" {
		t.Errorf("rejected invoice %+v, want no charge, key %s", inv, e.EventID)
	}
	poll.Until(t, "dead_lettered", 10*time.Second, func() bool { return h.outcome("dead_lettered") == 1 })

	close(fixed)
	kc, err := kafkaclient.NewCluster(KafkaSettings(h.cfg))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if n, err := replayed(context.Background(), kc, h.cfg.KafkaDLQTopic, testTopic, kafkain.ReplayOptions{}, log); err != nil || n != 1 {
		t.Fatalf("replay: %d, %v; want 1", n, err)
	}
	inv = h.waitInvoice("ord-refused", order.StatusCharged)
	if charges := gw.ChargesForOrder("ord-refused"); len(charges) != 1 || inv.EventID != e.EventID || charges[0].ID != inv.ChargeID {
		t.Errorf("charges %+v, invoice %+v; want one charge under %s", charges, inv, e.EventID)
	}
}
