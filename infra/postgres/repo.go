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

const invoiceColumns = `order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), created_at`

// The statements of billing's transactions (Store's pipelined Reserve and
// its Settle); bench/reserve_settle.sql repeats them for the pgbench ceiling
// of `make bench`.
const (
	sqlInvoiceForUpdate = `SELECT ` + invoiceColumns + ` FROM invoice WHERE order_id = $1 FOR UPDATE`
	// sqlSettle moves the invoice only while it is pending under the key
	// that was charged ($4): a late answer to an older key never settles an
	// invoice that a later event reopened under its own.
	sqlSettle = `UPDATE invoice SET status = $2, charge_id = NULLIF($3, ''), updated_at = now()
		 WHERE order_id = $1 AND event_id = $4 AND status = 'pending'`

	// sqlReserve is the writing half of the reserve transaction (CONTRACT.md
	// §4), one statement so that its parts depend on each other inside the
	// server: the dedup row ($2, $6); the order's invoice inserted pending
	// under this event only when the dedup row is new (a seen event_id opens
	// nothing, whatever order it names), and never under a key another
	// invoice holds (ON CONFLICT without a target covers order_id and
	// event_id); a rejected invoice reopened under this event's id, amount,
	// currency and customer when the event is new, or when it is the replay
	// of the very event that was rejected (its dedup row exists, the key is
	// the invoice's own), and only if no other invoice holds the key. It
	// returns whether the dedup row was new and whether it reopened.
	// updated_at is when the invoice's current key started: the completer's
	// and the gauges' clock.
	sqlReserve = `WITH dedup AS (
		INSERT INTO processed_event (event_id, consumer_group) VALUES ($2, $6)
		ON CONFLICT (event_id, consumer_group) DO NOTHING
		RETURNING event_id
	), opened AS (
		INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint, $5::text, 'pending' FROM dedup
		ON CONFLICT DO NOTHING
		RETURNING order_id
	), reopened AS (
		UPDATE invoice SET event_id = $2, customer_id = $3, amount = $4, currency = $5, status = 'pending',
			charge_id = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now()
		WHERE order_id = $1 AND status = 'rejected'
			AND (event_id = $2 OR EXISTS (SELECT FROM dedup))
			AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = $2 AND other.order_id <> $1)
		RETURNING order_id
	)
	SELECT EXISTS (SELECT FROM dedup), EXISTS (SELECT FROM reopened)`
)

// reserveArgs are sqlReserve's arguments for inv and group.
func reserveArgs(inv order.Invoice, group string) []any {
	return []any{inv.OrderID, pgtype.UUID{Bytes: inv.EventID, Valid: true}, inv.CustomerID, inv.Amount, inv.Currency, group}
}

func scanInvoice(row pgx.Row) (order.Invoice, error) {
	var (
		inv     order.Invoice
		eventID pgtype.UUID
		status  string
	)
	if err := row.Scan(&inv.OrderID, &eventID, &inv.CustomerID, &inv.Amount, &inv.Currency, &status, &inv.ChargeID, &inv.CreatedAt); err != nil {
		return order.Invoice{}, err
	}
	inv.EventID = uuid.UUID(eventID.Bytes)
	inv.Status = order.InvoiceStatus(status)
	return inv, nil
}
