-- resolve applies a person's decision to an invoice ($1 the order, $2 the new
-- status, $3 the charge id, $4 the key the person looked at, $5 the key age in
-- seconds past which a pending invoice is theirs to decide), and records it
-- in decision ($6 who, $7 the command, $8 the note, $9 and $10 the status and
-- reason the invoice had, as the transaction read them locked, resolve_read):
-- only while the invoice is under that key, held, or pending with its key
-- first sent more than $5 ago, and no attempt is alive. The last condition is
-- the fence's rule (docs/design.md, "One attempt per key at a time (the
-- fence)"): the decision takes the invoice's attempt and ends it in one
-- statement, under the row lock, like a settle; an attempt that ended without
-- an answer is recorded in the invoice's history as every take records it. A
-- decision keeps the hold's reason on the invoice, but --rejected records its
-- own ("rejected by a person", the hold's reason staying in the decision's
-- row), and writes the invoice event of its status when $11 (publishing on).
-- A resumed invoice is pending again under its key, which publishes nothing:
-- no attempt, due for the completer at once, and its updated_at back to when
-- its key started (key_sent_at), the completer's and the gauges' clock.
WITH moved AS (
	UPDATE invoice SET status = $2, charge_id = NULLIF($3, ''),
		reason = CASE WHEN $2 = 'rejected' THEN 'rejected by a person (billing invoice resolve)' WHEN $2 = 'pending' THEN NULL ELSE reason END,
		updated_at = CASE WHEN $2 = 'pending' THEN coalesce(key_sent_at, updated_at) ELSE now() END,
		attempt_until = NULL, next_resume_at = NULL, resume_attempts = 0,
		reopens = CASE WHEN $2 = 'pending' THEN reopens + 1 ELSE reopens END, written_xact = pg_current_xact_id(), answers = CASE WHEN attempt_until IS NULL THEN answers
		ELSE invoice_answers_push(answers, attempt_until, event_id, 'no answer recorded') END
	WHERE order_id = $1 AND event_id = $4
		AND (status = 'held' OR (status = 'pending' AND $5::float8 > 0 AND key_sent_at <= now() - make_interval(secs => $5::float8)))
		AND (attempt_until IS NULL OR attempt_until <= now())
	RETURNING *
), resolved_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM moved WHERE status <> 'pending' AND $11::boolean ON CONFLICT (event_id) DO NOTHING
), decided AS (
	INSERT INTO decision (decided_by, command, order_id, idempotency_key, status_before, status_after, charge_id, reason_before, note)
	SELECT $6, $7, order_id, event_id, $9, status, charge_id, NULLIF($10, ''), NULLIF($8, '') FROM moved
)
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens FROM moved;
