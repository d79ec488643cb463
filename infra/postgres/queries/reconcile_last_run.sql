-- reconcile_last_run reads the newest completed `billing reconcile` run
-- (by id, through the primary key): what the service exports as
-- billing_reconcile_discrepancies{kind} and
-- billing_reconcile_last_run_timestamp_seconds. No row: no run yet.
SELECT finished_at, period_from, period_to, orders,
	money_without_charged_invoice, charged_invoice_without_money, amount_mismatch, double_charge,
	held_settled, held_left
FROM reconcile_run
ORDER BY id DESC
LIMIT 1;
