package postgres

import (
	"errors"
	"fmt"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
)

// partitionRaceError is the *order.TransientError of an insert of eventID
// that lost the race with the attachment of its day partition.
func partitionRaceError(eventID uuid.UUID, err error) error {
	return &order.TransientError{Op: "insert processed_event " + eventID.String(),
		Err: fmt.Errorf("its day partition was attached concurrently: %w", err)}
}

// scanInvoice reads a row of an invoice's columns, as every statement that
// reads invoices selects them first (queries/invoices_all.sql), and after
// them the values of extra.
func scanInvoice(row pgx.Row, extra ...any) (order.Invoice, error) {
	// One allocation for every target and the list Scan takes, rather than
	// one each: the targets escape to the heap through Scan's interface
	// (make bench's allocation profiles; two rows per charged event).
	r := new(invoiceScan)
	dest := append(r.dest[:0], &r.inv.OrderID, &r.eventID, &r.inv.CustomerID, &r.inv.Amount, &r.inv.Currency, &r.status,
		&r.inv.ChargeID, &r.inv.Reason, &r.inv.CreatedAt, &r.keySentAt, &r.inv.Reopens)
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return order.Invoice{}, err
	}
	r.inv.EventID = uuid.UUID(r.eventID.Bytes)
	r.inv.Status = r.status.s
	if r.keySentAt.Valid {
		r.inv.KeySentAt = r.keySentAt.Time
	}
	return r.inv, nil
}

// maxExtra is how many values after an invoice's columns scanInvoice
// reads without a list of its own.
const maxExtra = 3

// invoiceScan is what scanInvoice scans one row into.
type invoiceScan struct {
	inv       order.Invoice
	eventID   pgtype.UUID
	status    statusScan
	keySentAt pgtype.Timestamptz
	dest      [11 + maxExtra]any
}

// statusScan scans a status column (text) as one of order's constants
// when it is one, which it nearly always is: no string to allocate.
type statusScan struct{ s order.InvoiceStatus }

// ScanBytes implements pgtype.BytesScanner; v is the driver's memory,
// valid only during the call.
func (t *statusScan) ScanBytes(v []byte) error {
	if v == nil {
		return errors.New("cannot scan NULL into a status")
	}
	for _, s := range [...]order.InvoiceStatus{order.StatusPending, order.StatusCharged, order.StatusDeclined,
		order.StatusRejected, order.StatusHeld} {
		if string(v) == string(s) {
			t.s = s
			return nil
		}
	}
	t.s = order.InvoiceStatus(v)
	return nil
}
