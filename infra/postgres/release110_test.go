package postgres_test

// The statements of release 1.1.0 (commit e6198e4) that write or read
// invoice, processed_event and invoice_outbox, copied verbatim from that
// commit (git show e6198e4:infra/postgres/repo.go, pending.go, resolve.go,
// outbox.go), their names prefixed: the release a rollback from this one
// goes back to, whose statements must still work on this release's schema.
// Comments inside the const blocks are kept, with the names prefixed;
// the statements are the release's, character for character.

// From infra/postgres/repo.go.
const v110InvoiceColumns = `order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens`

// From infra/postgres/repo.go.
const v110OutboxInsert = `INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
		SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, `

// From infra/postgres/repo.go.
const v110OutboxOnConflict = ` ON CONFLICT (event_id) DO NOTHING`

// From infra/postgres/repo.go.
const (
	// v110SQLReserveGroup is the writing half of the reserve transaction
	// (docs/interface.md §4) for a group of events with distinct orders and event
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
	v110SQLReserveGroup = `WITH input AS (
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
		` + v110OutboxInsert + `NULL FROM held WHERE $11::boolean` + v110OutboxOnConflict + `
	)
	SELECT i.order_id, EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id),
		EXISTS (SELECT FROM reopened r WHERE r.order_id = i.order_id),
		EXISTS (SELECT FROM held h WHERE h.order_id = i.order_id) FROM input i`

	// v110SQLReserveOne is v110SQLReserveGroup for a group of one event ($1…$6 its
	// values, $7 the consumer group, $8…$11 the same), written for one row.
	v110SQLReserveOne = `WITH dedup AS (
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
		` + v110OutboxInsert + `NULL FROM held WHERE $11::boolean` + v110OutboxOnConflict + `
	)
	SELECT EXISTS (SELECT FROM dedup), EXISTS (SELECT FROM reopened), EXISTS (SELECT FROM held)`

	// v110SQLInvoicesForUpdate reads the group's invoices after v110SQLReserveGroup,
	// in the same transaction, locking them in order_id order; with each,
	// the attempt it records and how long that attempt may still live.
	v110SQLInvoicesForUpdate = `SELECT ` + v110InvoiceColumns + `, coalesce(attempt_id, 0),
		greatest(extract(epoch FROM attempt_until - now()), 0)::float8
		FROM invoice WHERE order_id = ANY ($1::text[]) ORDER BY order_id FOR UPDATE`

	// v110SQLTakeAttempt takes the attempt of one order's invoice ($1) pending
	// under key $2 for attempt $3, as v110SQLReserveOne's taken and held do
	// ($4 life, $5 hold after, $6 the hold's reason, $7 publishing on), and
	// reports whether it held it. The pending completer's path.
	v110SQLTakeAttempt = `WITH taken AS (
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
		` + v110OutboxInsert + `NULL FROM held WHERE $7::boolean` + v110OutboxOnConflict + `
	)
	SELECT EXISTS (SELECT FROM held)`

	// v110SQLReleaseAttempt ends attempt $3 of order $1's invoice, pending under
	// key $2, early: its request is over. Another path's attempt is never
	// touched.
	v110SQLReleaseAttempt = `UPDATE invoice SET attempt_until = NULL
		WHERE order_id = $1 AND event_id = $2 AND attempt_id = $3 AND status = 'pending'`

	// v110SQLHoldStale holds the pending invoices whose key was first sent more
	// than $1 seconds ago and that no live attempt holds ($2 the reason, $3
	// publishing on), with their InvoiceHeld events.
	v110SQLHoldStale = `WITH held AS (
		UPDATE invoice SET status = 'held', reason = $2, attempt_until = NULL, updated_at = now()
		WHERE status = 'pending' AND key_sent_at <= now() - make_interval(secs => $1::float8)
			AND (attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), held_event AS (
		` + v110OutboxInsert + `NULL FROM held WHERE $3::boolean` + v110OutboxOnConflict + `
	)
	SELECT order_id FROM held`

	// v110SQLSettleGroup moves each order's invoice ($1) only while it is
	// pending under the key that was charged ($2) and no attempt but the
	// settling one ($3) can still be alive: a late answer to an older key
	// never settles an invoice that a later event reopened under its own,
	// and no path decides an invoice while another's request under its key
	// may still be at the gateway. $4 the status, $5 the charge id, $6 the
	// reason, $7 the traceparent of the event that caused it; with each
	// transition its invoice event, in the same statement, when $8
	// (publishing on). It returns the orders it moved.
	v110SQLSettleGroup = `WITH u AS (
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
		` + v110OutboxInsert + `NULLIF(cause, '') FROM moved WHERE $8::boolean` + v110OutboxOnConflict + `
	)
	SELECT order_id FROM moved`

	// v110SQLSettleOne is v110SQLSettleGroup for one order, its parameters in the
	// same order; it returns the number of invoices it moved.
	v110SQLSettleOne = `WITH moved AS (
		UPDATE invoice SET status = $4, charge_id = NULLIF($5, ''), reason = NULLIF($6, ''),
			updated_at = now(), attempt_until = NULL
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending'
			AND (attempt_id = $3 OR attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), settled_event AS (
		` + v110OutboxInsert + `NULLIF($7, '') FROM moved WHERE $8::boolean` + v110OutboxOnConflict + `
	)
	SELECT count(*) FROM moved`

	// v110PlanByIndex is the part of a prelude, the first statement of a
	// grouped pipeline, that has the pipeline's statements planned once
	// and by their indexes, for that transaction only. Left to itself
	// Postgres plans v110SQLReserveGroup afresh at every execution (a custom
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
	v110PlanByIndex = `set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
		set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

	// v110SQLReservePrelude starts a reserve pipeline of several events.
	v110SQLReservePrelude = `SELECT ` + v110PlanByIndex

	// v110SQLSettlePrelude starts every settle pipeline: v110PlanByIndex, and a
	// commit that does not wait for its WAL flush (settleGroup says why
	// that is safe for a settle, and only for a settle).
	v110SQLSettlePrelude = `SELECT ` + v110PlanByIndex + `, set_config('synchronous_commit', 'off', true)`
)

// From infra/postgres/pending.go.
const v110SQLClaimPending = `WITH claimed AS (
		UPDATE invoice SET resume_attempts = resume_attempts + 1,
			next_resume_at = now() + make_interval(secs => least($3 * power(2, least(resume_attempts, 30)), $4))
		WHERE order_id IN (
			SELECT order_id FROM invoice
			WHERE status = 'pending' AND updated_at < now() - make_interval(secs => $1)
				AND (next_resume_at IS NULL OR next_resume_at <= now())
			ORDER BY updated_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING *)
	SELECT ` + v110InvoiceColumns + ` FROM claimed ORDER BY updated_at, order_id`

// From infra/postgres/resolve.go.
const v110SQLResolve = `WITH moved AS (
		UPDATE invoice SET status = $2, charge_id = NULLIF($3, ''),
			reason = CASE WHEN $2 = 'rejected' THEN 'rejected by a person (billing invoice resolve)' ELSE NULL END,
			updated_at = CASE WHEN $2 = 'pending' THEN coalesce(key_sent_at, updated_at) ELSE now() END,
			attempt_until = NULL, next_resume_at = NULL, resume_attempts = 0,
			reopens = CASE WHEN $2 = 'pending' THEN reopens + 1 ELSE reopens END
		WHERE order_id = $1 AND status = 'held' AND (attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), resolved_event AS (
		` + v110OutboxInsert + `NULL FROM moved WHERE status <> 'pending' AND $4::boolean` + v110OutboxOnConflict + `
	)
	SELECT ` + v110InvoiceColumns + ` FROM moved`

// From infra/postgres/outbox.go.
const v110SQLClaimOutbox = `SELECT o.id, o.event_id, o.order_id, o.status, o.customer_id, o.amount, o.currency, o.idempotency_key,
		coalesce(o.charge_id, ''), coalesce(o.reason, ''), coalesce(o.traceparent, ''), o.occurred_at
	FROM invoice_outbox o
	WHERE NOT EXISTS (SELECT FROM invoice_outbox earlier WHERE earlier.order_id = o.order_id AND earlier.id < o.id)
		AND pg_visible_in_snapshot(o.xact, $2::pg_snapshot)
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED`

// From infra/postgres/outbox.go.
const v110SQLFlushWAL = `BEGIN; SET LOCAL synchronous_commit = on;
	SELECT pg_current_snapshot()::text,
		CASE WHEN EXISTS (SELECT FROM invoice_outbox) THEN pg_logical_emit_message(true, 'billing.outbox-flush', '') END IS NOT NULL;
	COMMIT`
