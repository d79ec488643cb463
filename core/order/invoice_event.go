package order

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gofrs/uuid/v5"
)

// InvoiceEventType is the event_type of an invoice event (CONTRACT.md §9),
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
// an order: one per transition of its invoice (CONTRACT.md §9).
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

// invoiceEventJSON is the value of an invoice event record, its members in
// CONTRACT.md §9's order.
type invoiceEventJSON struct {
	EventID        string `json:"event_id"`
	EventType      string `json:"event_type"`
	OccurredAt     string `json:"occurred_at"`
	OrderID        string `json:"order_id"`
	CustomerID     string `json:"customer_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
	ChargeID       string `json:"charge_id,omitempty"`
	Reason         string `json:"reason,omitempty"`
}

// EncodeInvoiceEvent returns e's record value (CONTRACT.md §9): charge_id
// only on InvoiceCharged and only when known, reason only on
// InvoiceRejected and InvoiceHeld, bounded to one line of 256 bytes.
func EncodeInvoiceEvent(e InvoiceEvent) ([]byte, error) {
	typ := e.Type()
	if typ == "" {
		return nil, fmt.Errorf("invoice event of order %s: status %q publishes nothing", e.OrderID, e.Status)
	}
	v := invoiceEventJSON{
		EventID: e.EventID.String(), EventType: string(typ), OccurredAt: e.OccurredAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		OrderID: e.OrderID, CustomerID: e.CustomerID, Amount: e.Amount, Currency: e.Currency,
		IdempotencyKey: e.IdempotencyKey.String(),
	}
	switch typ {
	case InvoiceCharged:
		v.ChargeID = e.ChargeID
	case InvoiceRejected, InvoiceHeld:
		v.Reason = oneLineBounded(e.Reason, maxReasonBytes)
	}
	return json.Marshal(v)
}

// EventPublisher writes invoice events where other services read them
// (BILLING_KAFKA_INVOICE_TOPIC): all of them acknowledged, or an error.
type EventPublisher interface {
	Publish(ctx context.Context, events []InvoiceEvent) error
}
