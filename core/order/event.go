package order

import (
	"fmt"
	"time"

	"github.com/gofrs/uuid/v5"
)

// EventTypeOrderConfirmed is the only event_type billing accepts.
const EventTypeOrderConfirmed = "OrderConfirmed"

// MaxEventBytes is the largest event value accepted (1 MiB).
const MaxEventBytes = 1 << 20

// OrderConfirmedEvent is an order confirmed upstream, to be billed once.
// TotalAmount is in minor units of Currency.
type OrderConfirmedEvent struct {
	EventID     uuid.UUID
	EventType   string
	OccurredAt  time.Time
	OrderID     string
	CustomerID  string
	TotalAmount int64
	Currency    string
}

// Money is an amount in minor units (cents) of a three-letter currency.
type Money struct {
	Amount   int64
	Currency string
}

// String formats m as "12990 EUR" (minor units, no float rounding anywhere).
func (m Money) String() string { return fmt.Sprintf("%d %s", m.Amount, m.Currency) }

// Order is what upstream knows of a confirmed order.
type Order struct {
	ID          string
	CustomerID  string
	TotalAmount int64
	Currency    string
	ConfirmedAt time.Time
}

// NewOrderConfirmedEvent builds the event for o with a fresh UUIDv7 EventID
// (the style guide billing follows wants time-ordered event ids), so that
// event ids sort by creation time.
func NewOrderConfirmedEvent(o Order) (OrderConfirmedEvent, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return OrderConfirmedEvent{}, fmt.Errorf("new event id: %w", err)
	}
	return OrderConfirmedEvent{
		EventID:     id,
		EventType:   EventTypeOrderConfirmed,
		OccurredAt:  o.ConfirmedAt,
		OrderID:     o.ID,
		CustomerID:  o.CustomerID,
		TotalAmount: o.TotalAmount,
		Currency:    o.Currency,
	}, nil
}
