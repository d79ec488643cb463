package order

import (
	"context"
	"time"

	"github.com/gofrs/uuid/v5"
)

// InvoiceStatus is the state of an order's invoice.
type InvoiceStatus string

// Invoice states. An invoice is written pending before the money moves and
// becomes charged, declined or rejected after the gateway answers.
const (
	StatusPending  InvoiceStatus = "pending"
	StatusCharged  InvoiceStatus = "charged"
	StatusDeclined InvoiceStatus = "declined"
	// StatusRejected: the gateway refused the charge without executing it
	// (CONTRACT.md §4): no money moved. Final for its key, but not billed:
	// the next event of the order reopens the invoice under its own key.
	StatusRejected InvoiceStatus = "rejected"
)

// Final reports whether the gateway's answer to the invoice's key is
// recorded (charged, declined or rejected): a settle target.
func (s InvoiceStatus) Final() bool {
	return s == StatusCharged || s == StatusDeclined || s == StatusRejected
}

// Billed reports whether the order is done for good (charged or declined):
// every later event of the order is a duplicate.
func (s InvoiceStatus) Billed() bool { return s == StatusCharged || s == StatusDeclined }

// Invoice is the one bill of an order. EventID is the event that opened it;
// its value is the charge's Idempotency-Key for as long as the invoice lives.
type Invoice struct {
	OrderID    string
	EventID    uuid.UUID
	CustomerID string
	Amount     int64
	Currency   string
	Status     InvoiceStatus
	ChargeID   string // "" while pending, or when the gateway did not say
	CreatedAt  time.Time
}

// Reservation is what the reserve transaction found: whether the event's
// dedup row was new, and the order's invoice after the insert (this event's,
// or the one an earlier event of the order opened).
type Reservation struct {
	FirstSeen bool    // (event_id, group) was not in processed_event before
	Reopened  bool    // a rejected invoice of the order now pending under this event
	Invoice   Invoice // the order's invoice, read locked
	// Found is false when the order has no invoice: the event's id was seen
	// before (for another order, since it opened nothing for this one), or
	// another order's invoice holds it as its key.
	Found bool
}

// Ledger keeps the dedup table and the invoices. Each method is one
// database transaction, all or nothing; an implementation may run it again
// in place after a serialization failure or deadlock, and translates driver
// errors into OutageError / TransientError at its edge.
type Ledger interface {
	// Reserve, in one transaction: records (inv.EventID, group) in
	// processed_event (ON CONFLICT DO NOTHING, FirstSeen when it inserted);
	// when that row is new, inserts inv as the order's pending invoice unless
	// the order has one or another invoice holds inv.EventID as its key;
	// reopens the order's rejected invoice under inv (its key, amount,
	// currency, customer) when the row is new or inv.EventID is already that
	// invoice's key, and no other invoice holds it; and reads the order's
	// invoice FOR UPDATE.
	Reserve(ctx context.Context, inv Invoice, group string) (Reservation, error)
	// Settle moves the order's invoice, if it is pending under key, to
	// status (charged, declined or rejected), recording chargeID, and
	// reports whether it did (false: it was final already, or reopened
	// under another key since).
	Settle(ctx context.Context, orderID string, key uuid.UUID, status InvoiceStatus, chargeID string) (bool, error)
}

// ChargeRequest is one charge at the payment gateway.
type ChargeRequest struct {
	IdempotencyKey uuid.UUID // the invoice's EventID
	OrderID        string
	CustomerID     string
	Amount         Money
}

// ChargeStatus is the business answer of the gateway.
type ChargeStatus int

// Charge answers.
const (
	ChargeSucceeded ChargeStatus = iota + 1
	ChargeDeclined
)

// ChargeResult is what the gateway decided. ChargeID may be "" when the
// gateway only said the key was already processed (409).
type ChargeResult struct {
	Status   ChargeStatus
	ChargeID string
	Replayed bool // the gateway answered from an earlier request with this key
}

// PaymentGateway charges money. Charge returns a ChargeResult for a success
// or a decline, a *TransientError for failures worth retrying, and a
// *PermanentError for requests the gateway will never accept.
type PaymentGateway interface {
	Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error)
}
