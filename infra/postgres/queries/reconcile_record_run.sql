-- reconcile_record_run keeps one completed `billing reconcile` run
-- (migrations/0008_reconcile.sql): $1 when it started, $2 and $3 the
-- period, $4 the provider, $5 who ran it and $6 where (NULL when not
-- known), $7 the orders compared, $8…$11 the discrepancies by kind, $12 and
-- $13 the held invoices settled and left. It returns when the run finished,
-- by Postgres's clock: the time billing_reconcile_last_run_timestamp_seconds
-- shows.
INSERT INTO reconcile_run (started_at, period_from, period_to, provider, ran_by, ran_on, orders,
	money_without_charged_invoice, charged_invoice_without_money, amount_mismatch, double_charge,
	held_settled, held_left)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6, ''), $7, $8, $9, $10, $11, $12, $13)
RETURNING finished_at;
