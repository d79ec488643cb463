-- list_newest lists invoices of the statuses $1 in them for at least $2
-- seconds, rejected first, then newest first, at most $3: the settled
-- statuses, which have no index by age (a full read of invoice, run only when
-- held and pending leave room under the limit, or when asked for).
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens, updated_at, greatest(extract(epoch FROM now() - updated_at), 0)::float8, resume_attempts FROM invoice
WHERE status = ANY ($1::text[]) AND updated_at <= now() - make_interval(secs => $2::float8)
ORDER BY status <> 'rejected', updated_at DESC, order_id LIMIT $3;
