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

// The statements of billing's transactions: Store's grouped Reserve and
// Settle, one row per event of the group, and their forms for a group of
// one. bench/reserve_settle_grouped.sql repeats the grouped ones for the
// grouped pgbench ceiling of `make bench`; bench/reserve_settle.sql, the
// yardstick, one reserve and one settle transaction per event, the others.
const (
	// sqlReserveGroup is the writing half of the reserve transaction
	// (CONTRACT.md §4) for a group of events with distinct orders and event
	// ids ($1…$5, one array element per event; $6 the consumer group), one
	// statement so that its parts depend on each other inside the server:
	// the dedup rows; an order's invoice inserted pending under its event
	// only when that event's dedup row is new (a seen event_id opens
	// nothing, whatever order it names), and never under a key another
	// invoice holds (ON CONFLICT without a target covers order_id and
	// event_id); a rejected invoice reopened under the event's id, amount,
	// currency and customer when the event is new, or when it is the replay
	// of the very event that was rejected (its dedup row exists, the key is
	// the invoice's own), and only if no other invoice holds the key. It
	// returns, per order, whether its event's dedup row was new and whether
	// it reopened. The rows of one statement do not see each other's
	// writes, which is why a group never holds two events of one order or
	// two with one id (grouper). updated_at is when the invoice's current
	// key started: the completer's and the gauges' clock.
	sqlReserveGroup = `WITH input AS (
		SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[], $5::text[])
			AS t(order_id, event_id, customer_id, amount, currency)
	), dedup AS (
		INSERT INTO processed_event (event_id, consumer_group) SELECT event_id, $6 FROM input
		ON CONFLICT (event_id, consumer_group) DO NOTHING
		RETURNING event_id
	), opened AS (
		INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
		SELECT i.order_id, i.event_id, i.customer_id, i.amount, i.currency, 'pending' FROM input i JOIN dedup d USING (event_id)
		ON CONFLICT DO NOTHING
		RETURNING order_id
	), reopened AS (
		UPDATE invoice inv SET event_id = i.event_id, customer_id = i.customer_id, amount = i.amount, currency = i.currency,
			status = 'pending', charge_id = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now()
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'rejected'
			AND (inv.event_id = i.event_id OR EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id))
			AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = i.event_id AND other.order_id <> i.order_id)
		RETURNING inv.order_id
	)
	SELECT i.order_id, EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id),
		EXISTS (SELECT FROM reopened r WHERE r.order_id = i.order_id) FROM input i`

	// sqlReserveOne is sqlReserveGroup for a group of one event ($1…$5 its
	// values, $6 the consumer group), written for one row.
	sqlReserveOne = `WITH dedup AS (
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

	// sqlInvoicesForUpdate reads the group's invoices after sqlReserveGroup,
	// in the same transaction, locking them in order_id order.
	sqlInvoicesForUpdate = `SELECT ` + invoiceColumns + ` FROM invoice WHERE order_id = ANY ($1::text[]) ORDER BY order_id FOR UPDATE`

	// sqlSettleGroup moves each order's invoice ($1) only while it is
	// pending under the key that was charged ($2): a late answer to an
	// older key never settles an invoice that a later event reopened under
	// its own. It returns the orders it moved.
	sqlSettleGroup = `UPDATE invoice SET status = u.status, charge_id = NULLIF(u.charge_id, ''), updated_at = now()
		FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[]) AS u(order_id, event_id, status, charge_id)
		WHERE invoice.order_id = u.order_id AND invoice.event_id = u.event_id AND invoice.status = 'pending'
		RETURNING invoice.order_id`

	// sqlSettleOne is sqlSettleGroup for one order, its parameters in the
	// same order ($1 order, $2 key, $3 status, $4 charge id).
	sqlSettleOne = `UPDATE invoice SET status = $3, charge_id = NULLIF($4, ''), updated_at = now()
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending'`

	// planByIndex is the part of a prelude, the first statement of a
	// grouped pipeline, that has the pipeline's statements planned once
	// and by their indexes, for that transaction only. Left to itself
	// Postgres plans sqlReserveGroup afresh at every execution (a custom
	// plan for the array at hand looks cheaper than the generic one), and
	// planning it costs about what running it does; while the generic plan
	// built from the statistics of a new, never analyzed table scans
	// invoice whole, and keeps doing so as the table grows. These
	// statements touch a few rows each by primary and unique keys, so
	// index lookups in nested loops are their right plan at any size, on a
	// new database as on a large one (`make bench`'s grouped ceiling and
	// its in-flight 64 cell show what it is worth; the bench's tables are
	// emptied for every run, as new as they get). Set per transaction, it
	// reaches no other statement of the session, and passes PgBouncer
	// (which refuses unknown startup parameters).
	planByIndex = `set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
		set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

	// sqlReservePrelude starts a reserve pipeline of several events.
	sqlReservePrelude = `SELECT ` + planByIndex

	// sqlSettlePrelude starts every settle pipeline: planByIndex, and a
	// commit that does not wait for its WAL flush (settleGroup says why
	// that is safe for a settle, and only for a settle).
	sqlSettlePrelude = `SELECT ` + planByIndex + `, set_config('synchronous_commit', 'off', true)`
)

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
