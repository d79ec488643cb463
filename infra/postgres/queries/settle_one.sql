-- settle_one is settle_group for one order, its parameters in the same order;
-- it returns the number of invoices it moved.
WITH moved AS (
	UPDATE invoice SET status = $4, charge_id = NULLIF($5, ''), reason = NULLIF($6, ''),
		updated_at = now(), attempt_until = NULL, written_xact = pg_current_xact_id(), answers = invoice_answers_push(answers, now(), event_id, $9)
	WHERE order_id = $1 AND event_id = $2 AND status = 'pending'
		AND (attempt_id = $3 OR attempt_until IS NULL OR attempt_until <= now()
			OR (attempt_id = -1 AND $4 IN ('charged', 'declined')))
	RETURNING *
), settled_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULLIF($7, '') FROM moved WHERE $8::boolean ON CONFLICT (event_id) DO NOTHING
)
SELECT count(*) FROM moved;
