package kafkapub

import (
	"encoding/json"
	"fmt"

	"github.com/acme/billing/core/order"
)

// invoiceEventJSON is the value of an invoice event record, its members in
// docs/interface.md §9's order.
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

// EncodeInvoiceEvent returns e's record value (docs/interface.md §9):
// charge_id only on InvoiceCharged and only when known, reason only on
// InvoiceRejected and InvoiceHeld, bounded by order.PublishedReason. The
// event's id, type and content are core/order's; only the JSON is here.
func EncodeInvoiceEvent(e order.InvoiceEvent) ([]byte, error) {
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
	case order.InvoiceCharged:
		v.ChargeID = e.ChargeID
	case order.InvoiceRejected, order.InvoiceHeld:
		v.Reason = order.PublishedReason(e.Reason)
	}
	return json.Marshal(v)
}
