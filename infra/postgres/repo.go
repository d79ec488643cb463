package postgres

import (
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
	var (
		inv       order.Invoice
		eventID   pgtype.UUID
		status    string
		keySentAt pgtype.Timestamptz
	)
	dest := append([]any{&inv.OrderID, &eventID, &inv.CustomerID, &inv.Amount, &inv.Currency, &status, &inv.ChargeID,
		&inv.Reason, &inv.CreatedAt, &keySentAt, &inv.Reopens}, extra...)
	if err := row.Scan(dest...); err != nil {
		return order.Invoice{}, err
	}
	inv.EventID = uuid.UUID(eventID.Bytes)
	inv.Status = order.InvoiceStatus(status)
	if keySentAt.Valid {
		inv.KeySentAt = keySentAt.Time
	}
	return inv, nil
}
