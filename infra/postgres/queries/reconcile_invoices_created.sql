-- reconcile_invoices_created reads the invoices created in [$1, $2), the
-- period `billing reconcile` compares, oldest first, through the BRIN index
-- on created_at (migrations/0008_reconcile.sql). The columns are
-- scanInvoice's.
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens
FROM invoice
WHERE created_at >= $1 AND created_at < $2
ORDER BY created_at, order_id;
