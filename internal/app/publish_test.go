package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestInvoiceEventsPublished: with BILLING_PUBLISH_EVENTS on,
// billing creates the invoice topic with the main topic's partitions and
// publishes each transition once, keyed by order, in the order of the
// order's transitions (a rejection, then the charge of the event that
// reopened it), with the traceparent of the event that caused it.
func TestInvoiceEventsPublished(t *testing.T) {
	t.Parallel()
	rejected, m1 := event(t, "ord-reopened", "cus-1", 700)
	gw := gatewaystub.New(gatewaystub.Options{})
	gw.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		if c.Key == rejected.EventID.String() {
			return gatewaystub.Fault{Status: 400}
		}
		return gatewaystub.Fault{}
	})
	h := newHarness(t, gw, func(c *config.Config) { c.PublishEvents = true })
	reopening, m2 := event(t, "ord-reopened", "cus-1", 650)
	charged, m3 := event(t, "ord-traced", "cus-2", 900)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	m3.Headers = []kafkago.Header{{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")}}
	h.send(m1)
	h.waitInvoice("ord-reopened", order.StatusRejected)
	h.send(m2, m3)

	recs := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaInvoiceTopic, 3, 20*time.Second)
	type value struct {
		EventID, EventType, OrderID, IdempotencyKey, ChargeID, Reason string
		Amount                                                        int64
	}
	var got []value
	for _, r := range recs {
		var v struct {
			EventID        string `json:"event_id"`
			EventType      string `json:"event_type"`
			OrderID        string `json:"order_id"`
			IdempotencyKey string `json:"idempotency_key"`
			ChargeID       string `json:"charge_id"`
			Reason         string `json:"reason"`
			Amount         int64  `json:"amount"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("invoice event %q: %v", r.Value, err)
		}
		if string(r.Key) != v.OrderID {
			t.Errorf("record key %q, want the order id %q", r.Key, v.OrderID)
		}
		if v.OrderID == "ord-traced" {
			if tp := headers(r)["traceparent"]; !strings.Contains(tp, traceID) {
				t.Errorf("InvoiceCharged of ord-traced: traceparent %q, want trace %s", tp, traceID)
			}
		}
		got = append(got, value{v.EventID, v.EventType, v.OrderID, v.IdempotencyKey, v.ChargeID, v.Reason, v.Amount})
	}
	want := map[string][]value{
		"ord-reopened": {
			{order.InvoiceEventID("ord-reopened", rejected.EventID, order.StatusRejected, 0).String(), "InvoiceRejected", "ord-reopened", rejected.EventID.String(), "", "", 700},
			{order.InvoiceEventID("ord-reopened", reopening.EventID, order.StatusCharged, 1).String(), "InvoiceCharged", "ord-reopened", reopening.EventID.String(), "", "", 650},
		},
		"ord-traced": {{order.InvoiceEventID("ord-traced", charged.EventID, order.StatusCharged, 0).String(), "InvoiceCharged", "ord-traced", charged.EventID.String(), "", "", 900}},
	}
	byOrder := map[string][]value{}
	for _, v := range got { // ReadAll orders by partition and offset: one order's events in their order
		byOrder[v.OrderID] = append(byOrder[v.OrderID], v)
	}
	for id, ws := range want {
		gs := byOrder[id]
		if len(gs) != len(ws) {
			t.Fatalf("%s: events %+v, want %+v", id, gs, ws)
		}
		for i := range ws {
			g, w := gs[i], ws[i]
			if g.EventID != w.EventID || g.EventType != w.EventType || g.IdempotencyKey != w.IdempotencyKey || g.Amount != w.Amount ||
				(w.EventType == "InvoiceCharged") != (g.ChargeID != "") || (w.EventType == "InvoiceRejected") != (g.Reason != "") {
				t.Errorf("%s event %d = %+v, want %+v (charge id on the charge, reason on the rejection)", id, i, g, w)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parts, err := h.app.kc.Partitions(ctx, h.cfg.KafkaTopic, h.cfg.KafkaInvoiceTopic)
	if err != nil || parts[h.cfg.KafkaInvoiceTopic] != parts[h.cfg.KafkaTopic] {
		t.Errorf("partitions %v, %v: want the invoice topic's equal to the main topic's", parts, err)
	}
	poll.Until(t, "published events counted", 10*time.Second, func() bool {
		return testutil.ToFloat64(h.app.Metrics.PublishedEvents.WithLabelValues("InvoiceCharged")) == 2 &&
			testutil.ToFloat64(h.app.Metrics.PublishedEvents.WithLabelValues("InvoiceRejected")) == 1
	})
}
