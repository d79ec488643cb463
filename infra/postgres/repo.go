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

// invoiceColumns are the columns of scanInvoice, in its order.
const invoiceColumns = `order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens`

// outboxInsert writes the invoice event (CONTRACT.md §9) of every row of a
// statement's CTE of invoices that have just moved into charged, declined,
// rejected or held; the statement appends the traceparent column's value,
// the CTE's name and the condition that publishing is on. Its id is a
// function of the transition (invoice_event_id, migrations/0005): the same
// transition written twice (a lost settle redone) is one event, and a row
// still waiting for the relay is not written again.
const outboxInsert = `INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
		SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, `

// outboxOnConflict ends an outboxInsert.
const outboxOnConflict = ` ON CONFLICT (event_id) DO NOTHING`

// The statements of billing's transactions: Store's grouped Reserve and
// Settle, one row per event of the group, and their forms for a group of
// one; the attempt's take and release; the completer's sweep.
// bench/reserve_settle_grouped.sql repeats the grouped ones for the grouped
// pgbench ceiling of `make bench`, bench/reserve_settle.sql the ones of a
// group of one (TestBenchScriptsCarryTheStoresStatements checks both).
//
// The attempt (CONTRACT.md §4, one attempt per key at a time): an invoice
// pending under a key may be sent by one path at a time, the one whose
// attempt_id it records, until attempt_until; a path that finds a live
// attempt of another sends nothing and looks again later. Every statement
// that moves an invoice out of pending (settle, hold) requires that no
// attempt but the mover's own can still be alive; a rejected invoice has
// none (its settle ended the last), so its reopen takes a new one at once.
// now() is the transaction's start: Postgres's clock for every pod.
const (
	// sqlReserveGroup is the writing half of the reserve transaction
	// (CONTRACT.md §4) for a group of events with distinct orders and event
	// ids ($1…$6, one array element per event: order, event id, customer,
	// amount, currency, the attempt id it would take; $7 the consumer group;
	// $8 the attempt's life and $9 the key age past which an invoice is
	// held, in seconds, 0 for never; $10 the reason recorded on a hold; $11
	// whether invoice events are published), one statement so that its
	// parts depend on each other inside the server:
	//   - the dedup rows, with the order each event id is first seen with;
	//   - an order's invoice inserted pending under its event, its attempt
	//     taken, only when that event's dedup row is new (a seen event_id
	//     opens nothing, whatever order it names), and never under a key
	//     another invoice holds (ON CONFLICT without a target covers
	//     order_id and event_id);
	//   - a rejected invoice reopened under the event's id, amount,
	//     currency and customer, its attempt taken, when the event is new,
	//     or is the very event that was rejected (the key is the invoice's
	//     own), or was first seen for this same order (a corrected event
	//     replayed from the DLQ), and only if no other invoice holds the key;
	//   - the attempt of an invoice already pending taken, when no attempt
	//     is alive and its key is not too old; held, when no attempt is
	//     alive and its key is too old, its InvoiceHeld event written (a
	//     hold by the key's age has no event for its cause: no traceparent).
	// It returns, per order, whether its event's dedup row was new, whether
	// it reopened, and whether it held. The CTEs touch disjoint rows (new,
	// rejected, pending with a young key, pending with an old one, as the
	// statement's snapshot shows them), and the rows of one statement do not
	// see each other's writes, which is why a group never holds two events
	// of one order or two with one id (grouper). updated_at is when the
	// invoice's current key started: the completer's and the gauges' clock;
	// key_sent_at when its first attempt was taken.
	sqlReserveGroup = `WITH input AS (
		SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::bigint[])
			AS t(order_id, event_id, customer_id, amount, currency, attempt_id)
	), dedup AS (
		INSERT INTO processed_event (event_id, consumer_group, order_id) SELECT event_id, $7, order_id FROM input
		ON CONFLICT (event_id, consumer_group) DO NOTHING
		RETURNING event_id
	), opened AS (
		INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, attempt_id, attempt_until, key_sent_at)
		SELECT i.order_id, i.event_id, i.customer_id, i.amount, i.currency, 'pending', i.attempt_id, now() + make_interval(secs => $8::float8), now()
		FROM input i JOIN dedup d USING (event_id)
		ON CONFLICT DO NOTHING
		RETURNING order_id
	), reopened AS (
		UPDATE invoice inv SET event_id = i.event_id, customer_id = i.customer_id, amount = i.amount, currency = i.currency,
			status = 'pending', charge_id = NULL, reason = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now(),
			reopens = inv.reopens + 1, attempt_id = i.attempt_id, attempt_until = now() + make_interval(secs => $8::float8), key_sent_at = now()
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'rejected'
			AND (inv.event_id = i.event_id OR EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id)
				OR EXISTS (SELECT FROM processed_event p WHERE p.event_id = i.event_id AND p.consumer_group = $7 AND p.order_id = i.order_id))
			AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = i.event_id AND other.order_id <> i.order_id)
		RETURNING inv.order_id
	), taken AS (
		UPDATE invoice inv SET attempt_id = i.attempt_id, attempt_until = now() + make_interval(secs => $8::float8),
			key_sent_at = coalesce(inv.key_sent_at, now())
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'pending' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
			AND ($9::float8 = 0 OR inv.key_sent_at IS NULL OR inv.key_sent_at > now() - make_interval(secs => $9::float8))
		RETURNING inv.order_id
	), held AS (
		UPDATE invoice inv SET status = 'held', reason = $10, attempt_until = NULL, updated_at = now()
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'pending' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
			AND $9::float8 > 0 AND inv.key_sent_at <= now() - make_interval(secs => $9::float8)
		RETURNING inv.*
	), held_event AS (
		` + outboxInsert + `NULL FROM held WHERE $11::boolean` + outboxOnConflict + `
	)
	SELECT i.order_id, EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id),
		EXISTS (SELECT FROM reopened r WHERE r.order_id = i.order_id),
		EXISTS (SELECT FROM held h WHERE h.order_id = i.order_id) FROM input i`

	// sqlReserveOne is sqlReserveGroup for a group of one event ($1…$6 its
	// values, $7 the consumer group, $8…$11 the same), written for one row.
	sqlReserveOne = `WITH dedup AS (
		INSERT INTO processed_event (event_id, consumer_group, order_id) VALUES ($2, $7, $1)
		ON CONFLICT (event_id, consumer_group) DO NOTHING
		RETURNING event_id
	), opened AS (
		INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, attempt_id, attempt_until, key_sent_at)
		SELECT $1::text, $2::uuid, $3::text, $4::bigint, $5::text, 'pending', $6::bigint, now() + make_interval(secs => $8::float8), now() FROM dedup
		ON CONFLICT DO NOTHING
		RETURNING order_id
	), reopened AS (
		UPDATE invoice SET event_id = $2, customer_id = $3, amount = $4, currency = $5, status = 'pending',
			charge_id = NULL, reason = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now(), reopens = reopens + 1,
			attempt_id = $6, attempt_until = now() + make_interval(secs => $8::float8), key_sent_at = now()
		WHERE order_id = $1 AND status = 'rejected'
			AND (event_id = $2 OR EXISTS (SELECT FROM dedup)
				OR EXISTS (SELECT FROM processed_event p WHERE p.event_id = $2 AND p.consumer_group = $7 AND p.order_id = $1))
			AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = $2 AND other.order_id <> $1)
		RETURNING order_id
	), taken AS (
		UPDATE invoice SET attempt_id = $6, attempt_until = now() + make_interval(secs => $8::float8), key_sent_at = coalesce(key_sent_at, now())
		WHERE order_id = $1 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
			AND ($9::float8 = 0 OR key_sent_at IS NULL OR key_sent_at > now() - make_interval(secs => $9::float8))
		RETURNING order_id
	), held AS (
		UPDATE invoice SET status = 'held', reason = $10, attempt_until = NULL, updated_at = now()
		WHERE order_id = $1 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
			AND $9::float8 > 0 AND key_sent_at <= now() - make_interval(secs => $9::float8)
		RETURNING *
	), held_event AS (
		` + outboxInsert + `NULL FROM held WHERE $11::boolean` + outboxOnConflict + `
	)
	SELECT EXISTS (SELECT FROM dedup), EXISTS (SELECT FROM reopened), EXISTS (SELECT FROM held)`

	// sqlInvoicesForUpdate reads the group's invoices after sqlReserveGroup,
	// in the same transaction, locking them in order_id order; with each,
	// the attempt it records and how long that attempt may still live.
	sqlInvoicesForUpdate = `SELECT ` + invoiceColumns + `, coalesce(attempt_id, 0),
		greatest(extract(epoch FROM attempt_until - now()), 0)::float8
		FROM invoice WHERE order_id = ANY ($1::text[]) ORDER BY order_id FOR UPDATE`

	// sqlTakeAttempt takes the attempt of one order's invoice ($1) pending
	// under key $2 for attempt $3, as sqlReserveOne's taken and held do
	// ($4 life, $5 hold after, $6 the hold's reason, $7 publishing on), and
	// reports whether it held it. The pending completer's path.
	sqlTakeAttempt = `WITH taken AS (
		UPDATE invoice SET attempt_id = $3, attempt_until = now() + make_interval(secs => $4::float8), key_sent_at = coalesce(key_sent_at, now())
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
			AND ($5::float8 = 0 OR key_sent_at IS NULL OR key_sent_at > now() - make_interval(secs => $5::float8))
		RETURNING order_id
	), held AS (
		UPDATE invoice SET status = 'held', reason = $6, attempt_until = NULL, updated_at = now()
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
			AND $5::float8 > 0 AND key_sent_at <= now() - make_interval(secs => $5::float8)
		RETURNING *
	), held_event AS (
		` + outboxInsert + `NULL FROM held WHERE $7::boolean` + outboxOnConflict + `
	)
	SELECT EXISTS (SELECT FROM held)`

	// sqlReleaseAttempt ends attempt $3 of order $1's invoice, pending under
	// key $2, early: its request is over. Another path's attempt is never
	// touched.
	sqlReleaseAttempt = `UPDATE invoice SET attempt_until = NULL
		WHERE order_id = $1 AND event_id = $2 AND attempt_id = $3 AND status = 'pending'`

	// sqlHoldStale holds the pending invoices whose key was first sent more
	// than $1 seconds ago and that no live attempt holds ($2 the reason, $3
	// publishing on), with their InvoiceHeld events.
	sqlHoldStale = `WITH held AS (
		UPDATE invoice SET status = 'held', reason = $2, attempt_until = NULL, updated_at = now()
		WHERE status = 'pending' AND key_sent_at <= now() - make_interval(secs => $1::float8)
			AND (attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), held_event AS (
		` + outboxInsert + `NULL FROM held WHERE $3::boolean` + outboxOnConflict + `
	)
	SELECT order_id FROM held`

	// sqlSettleGroup moves each order's invoice ($1) only while it is
	// pending under the key that was charged ($2) and no attempt but the
	// settling one ($3) can still be alive: a late answer to an older key
	// never settles an invoice that a later event reopened under its own,
	// and no path decides an invoice while another's request under its key
	// may still be at the gateway. $4 the status, $5 the charge id, $6 the
	// reason, $7 the traceparent of the event that caused it; with each
	// transition its invoice event, in the same statement, when $8
	// (publishing on). It returns the orders it moved.
	sqlSettleGroup = `WITH u AS (
		SELECT * FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
			AS u(order_id, event_id, attempt_id, status, charge_id, reason, traceparent)
	), moved AS (
		UPDATE invoice SET status = u.status, charge_id = NULLIF(u.charge_id, ''), reason = NULLIF(u.reason, ''),
			updated_at = now(), attempt_until = NULL
		FROM u
		WHERE invoice.order_id = u.order_id AND invoice.event_id = u.event_id AND invoice.status = 'pending'
			AND (invoice.attempt_id = u.attempt_id OR invoice.attempt_until IS NULL OR invoice.attempt_until <= now())
		RETURNING invoice.*, u.traceparent AS cause
	), settled_event AS (
		` + outboxInsert + `NULLIF(cause, '') FROM moved WHERE $8::boolean` + outboxOnConflict + `
	)
	SELECT order_id FROM moved`

	// sqlSettleOne is sqlSettleGroup for one order, its parameters in the
	// same order; it returns the number of invoices it moved.
	sqlSettleOne = `WITH moved AS (
		UPDATE invoice SET status = $4, charge_id = NULLIF($5, ''), reason = NULLIF($6, ''),
			updated_at = now(), attempt_until = NULL
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending'
			AND (attempt_id = $3 OR attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), settled_event AS (
		` + outboxInsert + `NULLIF($7, '') FROM moved WHERE $8::boolean` + outboxOnConflict + `
	)
	SELECT count(*) FROM moved`

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

// scanInvoice reads a row of invoiceColumns, and after them the values of
// extra.
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
