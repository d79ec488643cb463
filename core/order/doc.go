// Package order is the billing domain: the OrderConfirmed event and its
// validation, invoices, the rules that turn an at-least-once stream of events
// into exactly one charge per order, and the small interfaces (ports) those
// rules need from the outside. It imports no adapter, no driver and no Kafka
// client; adapters implement its ports.
package order
