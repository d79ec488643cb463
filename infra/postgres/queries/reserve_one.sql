-- reserve_one: reserve_group for a group of one event ($1…$6 its values, $7
-- the consumer group, $8…$11 the same), written for one row: for one row the
-- set-based statement costs the server more (`make bench`: the two pgbench
-- ceilings at G 1). Its parts and their rules are reserve_group's.
WITH dedup AS (
	INSERT INTO processed_event (event_id, consumer_group, order_id) VALUES ($2, $7, $1)
	ON CONFLICT (event_id, consumer_group) DO NOTHING
	RETURNING event_id
), opened AS (
	INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, attempt_id, attempt_until, key_sent_at, written_xact)
	SELECT $1::text, $2::uuid, $3::text, $4::bigint, $5::text, 'pending', $6::bigint, now() + make_interval(secs => $8::float8), now(), pg_current_xact_id() FROM dedup
	ON CONFLICT DO NOTHING
	RETURNING order_id
), reopened AS (
	UPDATE invoice SET event_id = $2, customer_id = $3, amount = $4, currency = $5, status = 'pending',
		charge_id = NULL, reason = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now(), reopens = reopens + 1,
		attempt_id = $6, attempt_until = now() + make_interval(secs => $8::float8), key_sent_at = now(), written_xact = pg_current_xact_id()
	WHERE order_id = $1 AND status = 'rejected' AND (attempt_until IS NULL OR attempt_until <= now())
		AND (event_id = $2 OR EXISTS (SELECT FROM dedup)
			OR EXISTS (SELECT FROM processed_event p WHERE p.event_id = $2 AND p.consumer_group = $7 AND p.order_id = $1))
		AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = $2 AND other.order_id <> $1)
	RETURNING order_id
), taken AS (
	UPDATE invoice SET attempt_id = $6, attempt_until = now() + make_interval(secs => $8::float8), key_sent_at = coalesce(key_sent_at, now()),
		written_xact = pg_current_xact_id(), answers = CASE WHEN attempt_until IS NULL THEN answers
		ELSE invoice_answers_push(answers, attempt_until, event_id, 'no answer recorded') END
	WHERE order_id = $1 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
		AND ($9::float8 = 0 OR key_sent_at IS NULL OR key_sent_at > now() - make_interval(secs => $9::float8))
	RETURNING order_id
), held AS (
	UPDATE invoice SET status = 'held', reason = $10, attempt_until = NULL, updated_at = now(), written_xact = pg_current_xact_id(), answers = CASE WHEN attempt_until IS NULL THEN answers
		ELSE invoice_answers_push(answers, attempt_until, event_id, 'no answer recorded') END
	WHERE order_id = $1 AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
		AND $9::float8 > 0 AND key_sent_at <= now() - make_interval(secs => $9::float8)
	RETURNING *
), held_event AS (
	INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
	SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM held WHERE $11::boolean ON CONFLICT (event_id) DO NOTHING
)
SELECT EXISTS (SELECT FROM dedup), EXISTS (SELECT FROM reopened), EXISTS (SELECT FROM held);
