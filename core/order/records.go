package order

import (
	"context"
	"time"
)

// RecordStatus is what a payment provider's own record says of one attempt
// (docs/interface.md §6, lookup and list).
type RecordStatus string

// Record statuses. Only RecordSucceeded is money taken; RecordPending is
// money that may still be taken (or, for a state the adapter does not
// know, may have been).
const (
	RecordSucceeded RecordStatus = "succeeded"
	RecordDeclined  RecordStatus = "declined" // the customer's payment failed: no money moved
	// RecordRefused: the provider refused the request without executing it
	// (generic), or the attempt was canceled (Stripe): no money moved.
	RecordRefused RecordStatus = "refused"
	// RecordPending: not final at the provider (Stripe: processing,
	// requires_capture…), or in a state the adapter does not know.
	RecordPending RecordStatus = "pending"
)

// PaymentRecord is one attempt as the provider recorded it. Every field
// passed the adapter's checks (the charge id rule, §3's order id rule, a
// positive amount, a three-letter currency): no free text of the
// provider reaches billing through it.
type PaymentRecord struct {
	ChargeID  string // the provider's id of the attempt (generic: charge_id; Stripe: the PaymentIntent's pi_…)
	OrderID   string
	Key       string // the Idempotency-Key it was made under; "" when the provider does not say
	Amount    Money
	Status    RecordStatus
	CreatedAt time.Time
}

// RecordsPage is one page of PaymentRecords.ChargesCreated.
type RecordsPage struct {
	Records []PaymentRecord
	// Next is the cursor of the next page, "" on the last. It is the
	// adapter's own token: pass it back as it is.
	Next string
	// Foreign counts the provider's records on this page that name no
	// order (not made by billing: another system sharing the account),
	// left out of Records.
	Foreign int
}

// PaymentRecords reads the payment provider's own records of attempts,
// under any key and kept longer than any key: what `billing reconcile`
// compares the invoices with. The adapters of both providers implement it
// (docs/interface.md §6).
type PaymentRecords interface {
	// ChargesOfOrder returns every attempt the provider recorded for
	// orderID, oldest first. A provider whose lookup is eventually
	// consistent (Stripe's search) may miss the newest attempts: its
	// adapter says how long a caller waits for them.
	ChargesOfOrder(ctx context.Context, orderID string) ([]PaymentRecord, error)
	// ChargesCreated returns one page of the attempts created in
	// [from, to), starting at cursor ("" for the first page). Pages follow
	// one order of the provider's (not necessarily by time): read them all
	// before drawing a conclusion.
	ChargesCreated(ctx context.Context, from, to time.Time, cursor string) (RecordsPage, error)
}

// LaggingRecords is implemented by PaymentRecords whose ChargesOfOrder
// may miss the attempts made in the last LookupLag (Stripe's search is
// eventually consistent); ChargesCreated has no lag. A reconciliation
// lists that last stretch instead of trusting the lookup with it
// (ReadRanges). PaymentRecords without it have a consistent lookup.
type LaggingRecords interface {
	LookupLag() time.Duration
}

// LookupLag is records' LookupLag, 0 for records without one.
func LookupLag(records PaymentRecords) time.Duration {
	if l, ok := records.(LaggingRecords); ok {
		return l.LookupLag()
	}
	return 0
}

// ValidOrderID reports whether s follows the event's rule for order_id
// (CheckID): not blank, at most MaxIDBytes, no control characters, valid
// UTF-8. The event's decoder checks its ids with the same CheckID.
func ValidOrderID(s string) bool { return CheckID(s) == "" }
