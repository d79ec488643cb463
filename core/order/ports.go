package order

import (
	"context"
	"time"

	"github.com/gofrs/uuid/v5"
)

// InvoiceStatus is the state of an order's invoice.
type InvoiceStatus string

// Invoice states. An invoice is written pending before the money moves and
// becomes charged or declined after the gateway answers.
const (
	StatusPending  InvoiceStatus = "pending"
	StatusCharged  InvoiceStatus = "charged"
	StatusDeclined InvoiceStatus = "declined"
)

// Final reports whether no further charge may happen for the invoice.
func (s InvoiceStatus) Final() bool { return s == StatusCharged || s == StatusDeclined }

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
	Invoice   Invoice // the order's invoice, read locked
	Found     bool    // false only if the invoice vanished: a bug or a manual edit
}

// Ledger keeps the dedup table and the invoices. Each method is one
// database transaction, all or nothing; an implementation may run it again
// in place after a serialization failure or deadlock, and translates driver
// errors into OutageError / TransientError at its edge.
type Ledger interface {
	// Reserve, in one transaction: records (inv.EventID, group) in
	// processed_event (ON CONFLICT DO NOTHING, FirstSeen when it inserted),
	// inserts inv as the order's pending invoice unless the order has one,
	// and reads the order's invoice FOR UPDATE.
	Reserve(ctx context.Context, inv Invoice, group string) (Reservation, error)
	// Settle moves the order's pending invoice to charged or declined,
	// recording chargeID, and reports whether it did (false: it was already
	// final).
	Settle(ctx context.Context, orderID string, status InvoiceStatus, chargeID string) (bool, error)
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
