-- take_attempt takes the attempt of one order's invoice ($1) pending under
-- key $2 for attempt $3, as reserve_one's taken and held do ($4 the attempt's
-- life, $5 the key age past which it is held, $6 the hold's reason, $7
-- publishing on), and reports whether it held it. The pending completer's
-- path (docs/design.md, "One attempt per key at a time (the fence)").
WITH taken AS (
	UPDATE invoice SET attempt_id = $3, attempt_until = now() + make_interval(secs => $4::float8), key_sent_at = coalesce(key_sent_at, now()),
		written_xact = pg_current_xact_id(), answers = CASE WHEN attempt_until IS NULL THEN answers
		ELSE invoice_answers_push(answers, attempt_until, event_id, 'no answer recorded') END
	WHERE order_id = $1 AND event_id = $2 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
		AND ($5::float8 = 0 OR key_sent_at IS NULL OR key_sent_at > now() - make_interval(secs => $5::float8))
	RETURNING order_id
), held AS (
	UPDATE invoice SET status = 'held', reason = $6, attempt_until = NULL, updated_at = now(), written_xact = pg_current_xact_id(), answers = CASE WHEN attempt_until IS NULL THEN answers
		ELSE invoice_answers_push(answers, attempt_until, event_id, 'no answer recorded') END
	WHERE order_id = $1 AND event_id = $2 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
		AND $5::float8 > 0 AND key_sent_at <= now() - make_interval(secs => $5::float8)
	RETURNING *
), held_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM held WHERE $7::boolean ON CONFLICT (event_id) DO NOTHING
)
SELECT EXISTS (SELECT FROM held);
