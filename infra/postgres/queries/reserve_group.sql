-- reserve_group: the writing half of the reserve transaction (docs/design.md,
-- "Reserve, charge, settle — not one transaction") for a group of events with
-- distinct orders and event ids. $1…$6, one array element per event: order,
-- event id, customer, amount, currency, the attempt id it would take; $7 the
-- consumer group; $8 the attempt's life and $9 the key age past which an
-- invoice is held, in seconds, 0 for never; $10 the reason recorded on a hold;
-- $11 whether invoice events are published. One statement, so that its parts
-- depend on each other inside the server:
--   - dedup: the dedup rows, with the order each event id is first seen with;
--   - opened: an order's invoice inserted pending under its event, its attempt
--     taken, only when that event's dedup row is new (a seen event_id opens
--     nothing, whatever order it names), and never under a key another
--     invoice holds (ON CONFLICT without a target covers order_id and
--     event_id);
--   - reopened: a rejected invoice reopened under the event's id, amount,
--     currency and customer, its attempt taken, when the event is new, or is
--     the very event that was rejected (the key is the invoice's own), or was
--     first seen for this same order (a corrected event replayed from the
--     DLQ), and only if no other invoice holds the key and no attempt under
--     the old key may still be in flight (the reserve then reports that
--     attempt's wait, and the event waits);
--   - taken: the attempt of an invoice already pending taken, when no attempt
--     is alive and its key is not too old;
--   - held: such an invoice held instead when its key is too old, and
--     held_event its InvoiceHeld event (a hold by the key's age has no event
--     for its cause: no traceparent).
-- It returns, per order, whether its event's dedup row was new, whether it
-- reopened, and whether it held. The CTEs touch disjoint rows (new, rejected,
-- pending with a young key, pending with an old one, as the statement's
-- snapshot shows them), and the rows of one statement do not see each other's
-- writes, which is why a group never holds two events of one order or two
-- with one id (infra/postgres's grouper). updated_at is when the invoice's
-- current key started: the completer's and the gauges' clock; key_sent_at
-- when its first attempt was taken.
--
-- The attempt (docs/design.md, "One attempt per key at a time (the fence)"):
-- an invoice pending under a key may be sent by one path at a time, the one
-- whose attempt_id it records, until attempt_until; a path that finds a live
-- attempt of another sends nothing and looks again later. Every statement
-- that moves an invoice out of pending (settle, hold) requires that no attempt
-- but the mover's own can still be alive, and so does a reopen: a rejected
-- invoice whose settle was this release's or 1.1.0's has no attempt left, but
-- one written beside a release that records none may carry that release's
-- (migrations/0006), and then it reopens once that attempt has ended. now()
-- is the transaction's start: Postgres's clock for every pod.
--
-- Shared with other statements and written out in each
-- (infra/postgres/statements_test.go ties the copies; docs/design.md, "SQL in
-- files"): every write of invoice stamps written_xact with
-- pg_current_xact_id(), which migration 0006's triggers skip; a take or a hold
-- records "no answer recorded" for an attempt that ended with no answer
-- (attempt_until still set); the outbox insert of an invoice event, whose id
-- is invoice_event_id (migrations/0005).
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::bigint[])
		AS t(order_id, event_id, customer_id, amount, currency, attempt_id)
), dedup AS (
	INSERT INTO processed_event (event_id, consumer_group, order_id) SELECT event_id, $7, order_id FROM input
	ON CONFLICT (event_id, consumer_group) DO NOTHING
	RETURNING event_id
), opened AS (
	INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, attempt_id, attempt_until, key_sent_at, written_xact)
	SELECT i.order_id, i.event_id, i.customer_id, i.amount, i.currency, 'pending', i.attempt_id, now() + make_interval(secs => $8::float8), now(), pg_current_xact_id()
	FROM input i JOIN dedup d USING (event_id)
	ON CONFLICT DO NOTHING
	RETURNING order_id
), reopened AS (
	UPDATE invoice inv SET event_id = i.event_id, customer_id = i.customer_id, amount = i.amount, currency = i.currency,
		status = 'pending', charge_id = NULL, reason = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now(),
		reopens = inv.reopens + 1, attempt_id = i.attempt_id, attempt_until = now() + make_interval(secs => $8::float8), key_sent_at = now(), written_xact = pg_current_xact_id()
	FROM input i
	WHERE inv.order_id = i.order_id AND inv.status = 'rejected' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
		AND (inv.event_id = i.event_id OR EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id)
			OR EXISTS (SELECT FROM processed_event p WHERE p.event_id = i.event_id AND p.consumer_group = $7 AND p.order_id = i.order_id))
		AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = i.event_id AND other.order_id <> i.order_id)
	RETURNING inv.order_id
), taken AS (
	UPDATE invoice inv SET attempt_id = i.attempt_id, attempt_until = now() + make_interval(secs => $8::float8),
		key_sent_at = coalesce(inv.key_sent_at, now()), written_xact = pg_current_xact_id(), answers = CASE WHEN inv.attempt_until IS NULL THEN inv.answers
		ELSE invoice_answers_push(inv.answers, inv.attempt_until, inv.event_id, 'no answer recorded') END
	FROM input i
	WHERE inv.order_id = i.order_id AND inv.status = 'pending' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
		AND ($9::float8 = 0 OR inv.key_sent_at IS NULL OR inv.key_sent_at > now() - make_interval(secs => $9::float8))
	RETURNING inv.order_id
), held AS (
	UPDATE invoice inv SET status = 'held', reason = $10, attempt_until = NULL, updated_at = now(), written_xact = pg_current_xact_id(), answers = CASE WHEN inv.attempt_until IS NULL THEN inv.answers
		ELSE invoice_answers_push(inv.answers, inv.attempt_until, inv.event_id, 'no answer recorded') END
	FROM input i
	WHERE inv.order_id = i.order_id AND inv.status = 'pending' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
		AND $9::float8 > 0 AND inv.key_sent_at <= now() - make_interval(secs => $9::float8)
	RETURNING inv.*
), held_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM held WHERE $11::boolean ON CONFLICT (event_id) DO NOTHING
)
SELECT i.order_id, EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id),
	EXISTS (SELECT FROM reopened r WHERE r.order_id = i.order_id),
	EXISTS (SELECT FROM held h WHERE h.order_id = i.order_id) FROM input i;
