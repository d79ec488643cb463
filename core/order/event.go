package order

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

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

// MaxIDBytes is the longest order_id or customer_id accepted, in bytes.
const MaxIDBytes = 128

// CheckID returns why id is not a valid order_id or customer_id
// (docs/interface.md §3: not blank, at most MaxIDBytes bytes of UTF-8, no
// control character), "" when it is. The event's decoder applies it to both
// ids, and so do the paths that take an id from elsewhere: a person's
// `billing invoice resolve ORDER_ID`.
func CheckID(id string) string {
	if len(id) > MaxIDBytes {
		return fmt.Sprintf("longer than %d bytes", MaxIDBytes)
	}
	blank := true
	for len(id) > 0 {
		r, size := utf8.DecodeRuneInString(id)
		switch {
		case r == utf8.RuneError && size == 1:
			return "not valid UTF-8"
		case unicode.IsControl(r): // Cc: C0, DEL and C1
			return "contains a control character"
		case !unicode.IsSpace(r):
			blank = false
		}
		id = id[size:]
	}
	if blank {
		return "blank"
	}
	return ""
}

// ValidAmount reports whether n is an amount billing charges: above 0, in
// minor units.
func ValidAmount(n int64) bool { return n > 0 }

// ValidCurrency reports whether s is a currency code billing accepts:
// exactly 3 upper-case letters A-Z (not checked against ISO 4217). The
// configured default currency must pass it.
func ValidCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// CheckEventID returns why u is not a valid event id, "" when it is: a
// UUID version 7 with the RFC 9562 variant, and neither the nil nor the max
// UUID, which are named as such rather than by their version.
func CheckEventID(u uuid.UUID) string {
	switch {
	case u == uuid.Nil:
		return "nil UUID"
	case u == uuid.Max:
		return "max UUID"
	case u.Version() != uuid.V7:
		return fmt.Sprintf("UUID version %d, want 7", u.Version())
	case u.Variant() != uuid.VariantRFC9562:
		return "UUID variant is not RFC 9562"
	}
	return ""
}
