package wire

import (
	"encoding/json"
	"time"

	"github.com/acme/billing/core/order"
)

// maxParsedOffset is the largest zone offset time.Parse accepts in RFC 3339,
// "+24:60": it checks hours <= 24 and minutes <= 60, not a real offset range.
const maxParsedOffset = 25 * time.Hour

// formatOccurredAt writes t in RFC 3339 with nanoseconds, in UTC when the UTC
// year has four digits. Decode accepts, and turns into UTC, instants up to
// 25 hours outside years 0000-9999 (such as "0000-01-01T00:00:00+01:00");
// those are written back with the extreme offset time.Parse accepts, so that
// Encode never refuses what Decode returned. time.Format would write that
// offset as "+25:00", which time.Parse refuses, hence the manual suffix.
func formatOccurredAt(t time.Time) (string, bool) {
	t = t.UTC()
	inRange := func(t time.Time) bool { return t.Year() >= 0 && t.Year() <= 9999 }
	if inRange(t) {
		return t.Format(time.RFC3339Nano), true
	}
	const local = "2006-01-02T15:04:05.999999999"
	if t.Year() < 0 {
		if l := t.Add(maxParsedOffset); inRange(l) {
			return l.Format(local) + "+24:60", true
		}
	} else if l := t.Add(-maxParsedOffset); inRange(l) {
		return l.Format(local) + "-24:60", true
	}
	return "", false
}

// wireEvent is the JSON form of order.OrderConfirmedEvent.
type wireEvent struct {
	EventID     string `json:"event_id"`
	EventType   string `json:"event_type"`
	OccurredAt  string `json:"occurred_at"`
	OrderID     string `json:"order_id"`
	CustomerID  string `json:"customer_id"`
	TotalAmount int64  `json:"total_amount"`
	Currency    string `json:"currency"`
}

// Encode returns e as the event's JSON (docs/interface.md §3), for
// producers (tests, the demo, e2e, the bench driver): event_id in lower
// case, occurred_at in RFC 3339 with nanoseconds in UTC (see
// formatOccurredAt for the one exception), currency always present. It
// refuses, with an *order.ValidationError, an event that Decode would
// refuse, so that nothing it writes is dead-lettered; Decode(Encode(e))
// equals e with OccurredAt in UTC.
func Encode(e order.OrderConfirmedEvent) ([]byte, error) {
	if reason := order.CheckEventID(e.EventID); reason != "" {
		return nil, invalid(memberEventID, reason)
	}
	if e.EventType != order.EventTypeOrderConfirmed {
		return nil, invalid(memberEventType, "want "+order.EventTypeOrderConfirmed)
	}
	at, ok := formatOccurredAt(e.OccurredAt)
	if !ok {
		return nil, invalid(memberOccurredAt, "no RFC 3339 form: year outside 0000-9999")
	}
	if reason := order.CheckID(e.OrderID); reason != "" {
		return nil, invalid(memberOrderID, reason)
	}
	if reason := order.CheckID(e.CustomerID); reason != "" {
		return nil, invalid(memberCustomerID, reason)
	}
	if !order.ValidAmount(e.TotalAmount) {
		return nil, invalid(memberTotalAmount, "must be greater than 0")
	}
	if !order.ValidCurrency(e.Currency) {
		return nil, invalid(memberCurrency, "want 3 upper-case letters A-Z")
	}
	return json.Marshal(wireEvent{
		EventID:     e.EventID.String(),
		EventType:   e.EventType,
		OccurredAt:  at,
		OrderID:     e.OrderID,
		CustomerID:  e.CustomerID,
		TotalAmount: e.TotalAmount,
		Currency:    e.Currency,
	})
}
