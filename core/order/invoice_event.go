package order

import (
	"context"
	"crypto/sha256"
	"strconv"
	"time"

	"github.com/gofrs/uuid/v5"
)

// InvoiceEventType is the event_type of an invoice event (docs/interface.md §9),
// the label of billing_published_events_total.
type InvoiceEventType string

// The invoice events: one per transition of an invoice into a final or
// held status.
const (
	InvoiceCharged  InvoiceEventType = "InvoiceCharged"
	InvoiceDeclined InvoiceEventType = "InvoiceDeclined"
	InvoiceRejected InvoiceEventType = "InvoiceRejected"
	InvoiceHeld     InvoiceEventType = "InvoiceHeld"
)

// InvoiceEventTypes returns every InvoiceEventType, for metrics created at
// zero and the demo's report.
func InvoiceEventTypes() []InvoiceEventType {
	return []InvoiceEventType{InvoiceCharged, InvoiceDeclined, InvoiceRejected, InvoiceHeld}
}

// EventTypeOf is the event of a transition into status; "" for pending,
// which publishes nothing.
func EventTypeOf(status InvoiceStatus) InvoiceEventType {
	switch status {
	case StatusCharged:
		return InvoiceCharged
	case StatusDeclined:
		return InvoiceDeclined
	case StatusRejected:
		return InvoiceRejected
	case StatusHeld:
		return InvoiceHeld
	}
	return ""
}

// InvoiceEvent is what billing tells the rest of the system it decided on
// an order: one per transition of its invoice (docs/interface.md §9).
type InvoiceEvent struct {
	EventID        uuid.UUID // InvoiceEventID(OrderID, IdempotencyKey, Status)
	Status         InvoiceStatus
	OccurredAt     time.Time
	OrderID        string
	CustomerID     string
	Amount         int64
	Currency       string
	IdempotencyKey uuid.UUID
	ChargeID       string // charged only; "" when the gateway gave none
	Reason         string // rejected and held
	TraceParent    string // of the event that caused the transition, when there is one
}

// Type is e's event_type.
func (e InvoiceEvent) Type() InvoiceEventType { return EventTypeOf(e.Status) }

// InvoiceEventID is the event id of the transition of orderID's invoice,
// under key, into status, after reopens returns to pending (Invoice.Reopens):
// a UUIDv7 whose 48-bit timestamp is the key's (a UUIDv7 itself) and whose
// other 74 bits come from SHA-256 of the four (the count only when not 0).
// A function of the transition, never of when it is written, so that a
// settle lost in a crash and redone, or a relay that publishes and dies
// before it marks the row, publishes the same id again; and a status
// reached again under the same key after a reopen (held, rejected by a
// person, reopened by its event's replay, held again) is a new transition
// with a new id, which a consumer that deduplicates by id does not drop.
// Postgres computes the same with invoice_event_id (migrations/0005), where
// the outbox row is written.
func InvoiceEventID(orderID string, key uuid.UUID, status InvoiceStatus, reopens int) uuid.UUID {
	in := orderID + "\x1f" + key.String() + "\x1f" + string(status)
	if reopens != 0 {
		in += "\x1f" + strconv.Itoa(reopens)
	}
	h := sha256.Sum256([]byte(in))
	var id uuid.UUID
	copy(id[:6], key[:6])
	copy(id[6:], h[:10])
	id[6] = id[6]&0x0f | 0x70 // version 7
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}

// PublishedReason is reason as an invoice event carries it: one line of at
// most 256 bytes, cut on a rune boundary, the bound of the reason an invoice
// records (so a recorded reason is published whole).
func PublishedReason(reason string) string { return oneLineBounded(reason, maxReasonBytes) }

// EventPublisher writes invoice events where other services read them
// (BILLING_KAFKA_INVOICE_TOPIC): all of them acknowledged, or an error.
type EventPublisher interface {
	Publish(ctx context.Context, events []InvoiceEvent) error
}
