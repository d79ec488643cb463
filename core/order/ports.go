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

// Tx is what billing does inside one database transaction. Implementations
// translate driver errors into OutageError / TransientError at their edge.
type Tx interface {
	// TryInsertProcessed records (eventID, group) in processed_event and
	// reports whether this was the first time (ON CONFLICT DO NOTHING,
	// RowsAffected()==1).
	TryInsertProcessed(ctx context.Context, eventID uuid.UUID, group string) (bool, error)
	// InsertInvoice inserts inv unless its order already has an invoice and
	// reports whether it inserted.
	InsertInvoice(ctx context.Context, inv Invoice) (bool, error)
	// InvoiceForUpdate returns the order's invoice locked for the rest of the
	// transaction; found is false when there is none.
	InvoiceForUpdate(ctx context.Context, orderID string) (inv Invoice, found bool, err error)
	// SettleInvoice moves a pending invoice to charged or declined and
	// reports whether it did (false: it was already final).
	SettleInvoice(ctx context.Context, orderID string, status InvoiceStatus, chargeID string) (bool, error)
}

// Transactor runs fn in one transaction: committed when fn returns nil,
// rolled back otherwise. It may run fn again on a serialization failure or
// deadlock, so fn must only act through tx.
type Transactor interface {
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
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
