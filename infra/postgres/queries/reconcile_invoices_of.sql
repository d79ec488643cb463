-- reconcile_invoices_of reads the invoices of the orders $1 (a text array),
-- whenever they were created: the orders of the provider's records of the
-- period whose invoice is older than it. Through the unique index on
-- order_id. The columns are scanInvoice's.
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens
FROM invoice
WHERE order_id = ANY ($1::text[]);
