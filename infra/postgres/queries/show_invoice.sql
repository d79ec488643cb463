-- show_invoice reads order $1's invoice for `billing invoice show`: the
-- summary's columns, Postgres's clock, its last attempt and whether it may
-- still be in flight, when the completer may claim it next, the gateway's
-- answers recorded for it (migrations/0007) and how many of its invoice
-- events wait to be published.
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens, updated_at, greatest(extract(epoch FROM now() - updated_at), 0)::float8, resume_attempts, now(), coalesce(attempt_id, 0), attempt_until,
		coalesce(attempt_until > now(), false), next_resume_at, coalesce(answers, '{}'),
		(SELECT count(*) FROM invoice_outbox o WHERE o.order_id = invoice.order_id)
	FROM invoice WHERE order_id = $1;
