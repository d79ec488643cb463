-- settle_group moves each order's invoice ($1) only while it is pending under
-- the key that was charged ($2) and no attempt but the settling one ($3) can
-- still be alive: a late answer to an older key never settles an invoice
-- that a later event reopened under its own, and no path decides an invoice
-- while another's request under its key may still be at the gateway. One
-- exception: an attempt of a release that records none (attempt_id -1,
-- written by migration 0006's triggers; this release's attempt ids are never
-- negative) does not keep this path from recording that the key charged or
-- was declined. That answer ends the order under this key (no second key can
-- follow it), and the gateway gives the other request under the same key the
-- same answer. $4 the status, $5 the charge id, $6 the reason, $7 the
-- traceparent of the event that caused it, $9 the gateway's answer
-- (order.AnswerOf) for the invoice's history; with each transition its
-- invoice event, in the same statement, when $8 (publishing on). It returns
-- the orders it moved. Why a settle need not wait for its WAL flush:
-- docs/design.md, "Grouped statements, and the settle that does not wait for
-- its flush".
WITH u AS (
	SELECT * FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $9::text[])
		AS u(order_id, event_id, attempt_id, status, charge_id, reason, traceparent, answer)
), moved AS (
	UPDATE invoice SET status = u.status, charge_id = NULLIF(u.charge_id, ''), reason = NULLIF(u.reason, ''),
		updated_at = now(), attempt_until = NULL, written_xact = pg_current_xact_id(), answers = invoice_answers_push(invoice.answers, now(), invoice.event_id, u.answer)
	FROM u
	WHERE invoice.order_id = u.order_id AND invoice.event_id = u.event_id AND invoice.status = 'pending'
		AND (invoice.attempt_id = u.attempt_id OR invoice.attempt_until IS NULL OR invoice.attempt_until <= now()
			OR (invoice.attempt_id = -1 AND u.status IN ('charged', 'declined')))
	RETURNING invoice.*, u.traceparent AS cause
), settled_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULLIF(cause, '') FROM moved WHERE $8::boolean ON CONFLICT (event_id) DO NOTHING
)
SELECT order_id FROM moved;
