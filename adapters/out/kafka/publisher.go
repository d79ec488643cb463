// Package kafkapub publishes billing's invoice events (docs/interface.md §9) to
// Kafka: one record per event, keyed by order id so that one order's events
// share a partition and keep their order, the event's JSON as the value,
// the traceparent of the event that caused it as a header.
package kafkapub

import (
	"context"
	"fmt"

	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
)

// Writer writes records, all of them acknowledged or an error: infra/kafka's
// Writer (acks from all in-sync replicas, Kafka's murmur2 partitioner).
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafkaclient.Message) error
}

// Publisher is order.EventPublisher on a Kafka topic.
type Publisher struct {
	w     Writer
	topic string
}

var _ order.EventPublisher = (*Publisher)(nil)

// NewPublisher returns a Publisher writing to topic through w.
func NewPublisher(w Writer, topic string) *Publisher { return &Publisher{w: w, topic: topic} }

// Publish writes events in one call, in their order.
func (p *Publisher) Publish(ctx context.Context, events []order.InvoiceEvent) error {
	msgs := make([]kafkaclient.Message, len(events))
	for i, e := range events {
		v, err := EncodeInvoiceEvent(e)
		if err != nil {
			return err
		}
		msgs[i] = kafkaclient.Message{Topic: p.topic, Key: []byte(e.OrderID), Value: v}
		if e.TraceParent != "" {
			msgs[i].Headers = []kafkaclient.Header{{Key: "traceparent", Value: []byte(e.TraceParent)}}
		}
	}
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("publish %d invoice events to %s: %w", len(msgs), p.topic, err)
	}
	return nil
}
