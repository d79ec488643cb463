-- resolve_read reads and locks order $1's invoice before a person's decision
-- (resolve), with whether its key was first sent more than $2 seconds ago and
-- how long its attempt may still live, in seconds (0: none alive), so that
-- the store can say why it refuses a decision.
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens,
	coalesce(key_sent_at <= now() - make_interval(secs => $2::float8), false),
	coalesce(extract(epoch FROM attempt_until - now()), 0)::float8
FROM invoice WHERE order_id = $1 FOR UPDATE;
