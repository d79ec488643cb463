// Package wire is the OrderConfirmed event's wire format: Decode turns a
// Kafka record's value into an order.OrderConfirmedEvent or an
// *order.ValidationError (which the consumer dead-letters), and Encode
// writes one, for the producers of tests, the demo, e2e and the bench
// driver. The JSON is here; what a valid id, currency or amount is, and the
// event itself, are core/order's.
//
// It is a package of its own under adapters/in/kafka, not a file of the
// consumer, so that producers and the fuzz test import the format alone:
// neither the consumer group nor kafka-go comes with it.
package wire
