-- invoices_for_update reads the invoices of orders $1 after the reserve, in
-- the same transaction, locking them in order_id order (concurrent groups
-- lock in one order and cannot deadlock on them); with each, the attempt it
-- records and how long that attempt may still live. The invoice's columns
-- are those of every statement the store reads invoices with (scanInvoice).
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens, coalesce(attempt_id, 0),
	greatest(extract(epoch FROM attempt_until - now()), 0)::float8
	FROM invoice WHERE order_id = ANY ($1::text[]) ORDER BY order_id FOR UPDATE;
