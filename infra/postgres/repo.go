package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
)

// DedupRepo writes processed_event, the dedup guard keyed by
// (event_id, consumer_group). Its zero value is ready to use.
type DedupRepo struct{}

// TryInsert records that group processed eventID, inside tx, and reports
// whether this is the first time: INSERT … ON CONFLICT DO NOTHING, and
// RowsAffected()==1 means the row is new. A concurrent insert of the same
// key waits for the other transaction and then reports false if it commits.
//
// An insert that waited to write into the DEFAULT partition while dedup
// maintenance attached the day partition of its id fails (SQLSTATE 23514 on
// processed_event_default); that is reported as an *order.TransientError:
// run again, the row goes to the new partition.
func (DedupRepo) TryInsert(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, group string) (bool, error) {
	tag, err := tx.Exec(ctx,
		sqlInsertProcessed, pgtype.UUID{Bytes: eventID, Valid: true}, group)
	if isDefaultPartitionRace(err) {
		return false, partitionRaceError(eventID, err)
	}
	if err != nil {
		return false, translate(ctx, fmt.Errorf("insert processed_event %s: %w", eventID, err))
	}
	return tag.RowsAffected() == 1, nil
}

// partitionRaceError is the *order.TransientError of an insert of eventID
// that lost the race with the attachment of its day partition.
func partitionRaceError(eventID uuid.UUID, err error) error {
	return &order.TransientError{Op: "insert processed_event " + eventID.String(),
		Err: fmt.Errorf("its day partition was attached concurrently: %w", err)}
}

// execer is what runs one statement: a transaction (pgx.Tx), or the pool
// for a statement committed on its own.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// InvoiceRepo reads and writes invoice, one row per order. Its zero value is
// ready to use.
type InvoiceRepo struct{}

const invoiceColumns = `order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), created_at`

// The statements of billing's transactions, shared by the repositories and
// Store's pipelined Reserve; bench/reserve_settle.sql repeats them for the
// pgbench ceiling of `make bench`.
const (
	sqlInsertProcessed = `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2)
		 ON CONFLICT (event_id, consumer_group) DO NOTHING`
	sqlInsertInvoice = `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, charge_id)
		 VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''))
		 ON CONFLICT (order_id) DO NOTHING`
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

// invoiceArgs are sqlInsertInvoice's arguments for inv.
func invoiceArgs(inv order.Invoice) []any {
	return []any{inv.OrderID, pgtype.UUID{Bytes: inv.EventID, Valid: true}, inv.CustomerID, inv.Amount, inv.Currency,
		string(inv.Status), inv.ChargeID}
}

// Insert inserts inv unless its order already has an invoice (ON CONFLICT
// (order_id) DO NOTHING) and reports whether it inserted. An empty ChargeID
// is stored as NULL.
func (InvoiceRepo) Insert(ctx context.Context, tx pgx.Tx, inv order.Invoice) (bool, error) {
	tag, err := tx.Exec(ctx,
		sqlInsertInvoice, invoiceArgs(inv)...)
	if err != nil {
		return false, translate(ctx, fmt.Errorf("insert invoice %s: %w", inv.OrderID, err))
	}
	return tag.RowsAffected() == 1, nil
}

// ForUpdate returns the order's invoice, locked (SELECT … FOR UPDATE) until
// tx ends; found is false when the order has none.
func (InvoiceRepo) ForUpdate(ctx context.Context, tx pgx.Tx, orderID string) (order.Invoice, bool, error) {
	row := tx.QueryRow(ctx, sqlInvoiceForUpdate, orderID)
	inv, err := scanInvoice(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return order.Invoice{}, false, nil
	}
	if err != nil {
		return order.Invoice{}, false, translate(ctx, fmt.Errorf("select invoice %s for update: %w", orderID, err))
	}
	return inv, true, nil
}

// errNotFinal rejects settling an invoice to a state that is not final.
var errNotFinal = errors.New("status is not final")

// Settle moves the order's invoice from pending under key to status
// (charged, declined or rejected), recording chargeID (NULL when ""), and
// reports whether it did: false when the invoice was already final, holds
// another key (reopened since), or does not exist.
func (InvoiceRepo) Settle(ctx context.Context, tx execer, orderID string, key uuid.UUID, status order.InvoiceStatus, chargeID string) (bool, error) {
	if !status.Final() {
		return false, TranslateError(fmt.Errorf("settle invoice %s to %q: %w", orderID, status, errNotFinal))
	}
	tag, err := tx.Exec(ctx,
		sqlSettle, orderID, string(status), chargeID, pgtype.UUID{Bytes: key, Valid: true})
	if err != nil {
		return false, translate(ctx, fmt.Errorf("settle invoice %s: %w", orderID, err))
	}
	return tag.RowsAffected() == 1, nil
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
