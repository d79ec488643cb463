-- invoices_all reads every invoice ordered by order_id, for tests, the demo
-- and end-to-end checks.
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens
FROM invoice ORDER BY order_id;
