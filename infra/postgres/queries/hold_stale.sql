-- hold_stale holds the pending invoices whose key was first sent more than $1
-- seconds ago and that no live attempt holds ($2 the reason, $3 publishing
-- on), with their InvoiceHeld events, and returns their orders.
WITH held AS (
	UPDATE invoice SET status = 'held', reason = $2, attempt_until = NULL, updated_at = now(), written_xact = pg_current_xact_id(), answers = CASE WHEN attempt_until IS NULL THEN answers
		ELSE invoice_answers_push(answers, attempt_until, event_id, 'no answer recorded') END
	WHERE status = 'pending' AND key_sent_at <= now() - make_interval(secs => $1::float8)
		AND (attempt_until IS NULL OR attempt_until <= now())
	RETURNING *
), held_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM held WHERE $3::boolean ON CONFLICT (event_id) DO NOTHING
)
SELECT order_id FROM held;
