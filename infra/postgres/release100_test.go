package postgres_test

// The statements of release 1.0.0 (commit 8072a37) that write or read
// invoice and processed_event, copied verbatim from that commit
// (git show 8072a37:infra/postgres/repo.go, pending.go), their names
// prefixed: the writer without the attempt fence that the tests of
// migration 0006 run beside this release. Comments inside the const
// blocks are kept, with the names prefixed; the statements are the
// release's, character for character.

// From infra/postgres/repo.go.
const v100InvoiceColumns = `order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), created_at`

// From infra/postgres/repo.go.
const (
	// v100SQLReserveGroup is the writing half of the reserve transaction
	// (docs/interface.md §4) for a group of events with distinct orders and event
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
	v100SQLReserveGroup = `WITH input AS (
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

	// v100SQLReserveOne is v100SQLReserveGroup for a group of one event ($1…$5 its
	// values, $6 the consumer group), written for one row.
	v100SQLReserveOne = `WITH dedup AS (
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

	// v100SQLInvoicesForUpdate reads the group's invoices after v100SQLReserveGroup,
	// in the same transaction, locking them in order_id order.
	v100SQLInvoicesForUpdate = `SELECT ` + v100InvoiceColumns + ` FROM invoice WHERE order_id = ANY ($1::text[]) ORDER BY order_id FOR UPDATE`

	// v100SQLSettleGroup moves each order's invoice ($1) only while it is
	// pending under the key that was charged ($2): a late answer to an
	// older key never settles an invoice that a later event reopened under
	// its own. It returns the orders it moved.
	v100SQLSettleGroup = `UPDATE invoice SET status = u.status, charge_id = NULLIF(u.charge_id, ''), updated_at = now()
		FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[]) AS u(order_id, event_id, status, charge_id)
		WHERE invoice.order_id = u.order_id AND invoice.event_id = u.event_id AND invoice.status = 'pending'
		RETURNING invoice.order_id`

	// v100SQLSettleOne is v100SQLSettleGroup for one order, its parameters in the
	// same order ($1 order, $2 key, $3 status, $4 charge id).
	v100SQLSettleOne = `UPDATE invoice SET status = $3, charge_id = NULLIF($4, ''), updated_at = now()
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending'`

	// v100PlanByIndex is the part of a prelude, the first statement of a
	// grouped pipeline, that has the pipeline's statements planned once
	// and by their indexes, for that transaction only. Left to itself
	// Postgres plans v100SQLReserveGroup afresh at every execution (a custom
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
	v100PlanByIndex = `set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
		set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

	// v100SQLReservePrelude starts a reserve pipeline of several events.
	v100SQLReservePrelude = `SELECT ` + v100PlanByIndex

	// v100SQLSettlePrelude starts every settle pipeline: v100PlanByIndex, and a
	// commit that does not wait for its WAL flush (settleGroup says why
	// that is safe for a settle, and only for a settle).
	v100SQLSettlePrelude = `SELECT ` + v100PlanByIndex + `, set_config('synchronous_commit', 'off', true)`
)

// From infra/postgres/pending.go.
const v100SQLClaimPending = `UPDATE invoice SET resume_attempts = resume_attempts + 1,
		next_resume_at = now() + make_interval(secs => least($3 * power(2, least(resume_attempts, 30)), $4))
	WHERE order_id IN (
		SELECT order_id FROM invoice
		WHERE status = 'pending' AND updated_at < now() - make_interval(secs => $1)
			AND (next_resume_at IS NULL OR next_resume_at <= now())
		ORDER BY updated_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED)
	RETURNING ` + v100InvoiceColumns
