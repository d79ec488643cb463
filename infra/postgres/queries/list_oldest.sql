-- list_oldest lists invoices of status $1 in it for at least $2 seconds,
-- oldest first, at most $3: held and pending, each read through its partial
-- index (invoice_held_idx, invoice_pending_updated_at_idx). `billing invoice
-- list`'s columns (scanSummary), shared with list_newest and show_invoice.
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens, updated_at, greatest(extract(epoch FROM now() - updated_at), 0)::float8, resume_attempts FROM invoice
WHERE status = $1 AND updated_at <= now() - make_interval(secs => $2::float8)
ORDER BY updated_at, order_id LIMIT $3;
