package kafka

import (
	"context"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/tracectx"
)

// Biller is the part of order.BillingService the handler needs.
type Biller interface {
	Bill(ctx context.Context, evt order.OrderConfirmedEvent) (order.Outcome, error)
}

// OrderConfirmedHandler turns one Kafka record into one billing call. The
// billing service does reserve, charge and settle (DESIGN.md); the handler
// decodes the raw bytes (a bad record is a *order.ValidationError, sent to
// the DLQ by the consumer) and carries the record's trace context.
type OrderConfirmedHandler struct {
	billing         Biller
	defaultCurrency string
}

// NewOrderConfirmedHandler returns a handler billing through b; events
// without a currency are billed in defaultCurrency.
func NewOrderConfirmedHandler(b Biller, defaultCurrency string) *OrderConfirmedHandler {
	return &OrderConfirmedHandler{billing: b, defaultCurrency: defaultCurrency}
}

// Handle decodes msg and bills it, with the record's W3C traceparent (if
// any) in ctx so that the gateway call carries it onward.
func (h *OrderConfirmedHandler) Handle(ctx context.Context, msg kafkago.Message) (order.Outcome, error) {
	if tp, ok := TraceParent(msg); ok {
		ctx = tracectx.NewContext(ctx, tp)
	}
	evt, err := order.Decode(msg.Value, h.defaultCurrency)
	if err != nil {
		return "", err
	}
	return h.billing.Bill(ctx, evt)
}

// TraceParent returns the record's W3C trace context, when it has a valid one.
func TraceParent(msg kafkago.Message) (tracectx.TraceParent, bool) {
	v, ok := Header(msg, tracectx.Header)
	if !ok {
		return tracectx.TraceParent{}, false
	}
	return tracectx.Parse(v)
}
