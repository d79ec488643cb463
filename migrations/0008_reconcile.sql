-- billing:no-transaction
-- squawk-disable-assume-in-transaction
-- 0008: reconciliation (docs/interface.md §1, §8; docs/design.md,
-- "Reconciliation"): each `billing reconcile` run's result, kept so that
-- the service exports it (billing_reconcile_discrepancies{kind},
-- billing_reconcile_last_run_timestamp_seconds: a CronJob is never
-- scraped), and an index to read the invoices of a period by.
--
-- Rollout: a new table and an index built concurrently; the previous
-- release neither reads nor writes the table, and the index blocks none
-- of its reads or writes while it is built. Each statement can run again
-- after any of them ran (the migrator repeats a no-transaction file from
-- its start after a failure).

-- One row per completed run: when it ran and what it compared (the period
-- of invoices and of the provider's records, the provider), who ran it
-- (--by NAME, NULL when not given) and where (the host: the CronJob's pod),
-- the orders compared, its discrepancies by kind (order.DiscrepancyKinds)
-- and what --resolve-held did. A run that failed half-way records nothing:
-- the alert on the last run's age sees it. The service reads the newest
-- row (by id) at every pass of its pending completer.
CREATE TABLE IF NOT EXISTS reconcile_run (
    id                            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at                    timestamptz NOT NULL,
    finished_at                   timestamptz NOT NULL DEFAULT now(),
    period_from                   timestamptz NOT NULL,
    period_to                     timestamptz NOT NULL,
    provider                      text        NOT NULL CHECK (provider IN ('generic', 'stripe')),
    ran_by                        text        NULL CHECK (length(ran_by) BETWEEN 1 AND 64),
    ran_on                        text        NULL CHECK (length(ran_on) <= 253),
    orders                        bigint      NOT NULL CHECK (orders >= 0),
    money_without_charged_invoice integer     NOT NULL CHECK (money_without_charged_invoice >= 0),
    charged_invoice_without_money integer     NOT NULL CHECK (charged_invoice_without_money >= 0),
    amount_mismatch               integer     NOT NULL CHECK (amount_mismatch >= 0),
    double_charge                 integer     NOT NULL CHECK (double_charge >= 0),
    held_settled                  integer     NOT NULL CHECK (held_settled >= 0),
    held_left                     integer     NOT NULL CHECK (held_left >= 0),
    CHECK (period_to > period_from)
);

-- The invoices of a period, by created_at, for `billing reconcile`. A
-- BRIN index, not a b-tree: invoices are appended in created_at order, so
-- a range summary per 128 pages finds a day's rows, and it costs the
-- reserve (the hot path) next to nothing, where a b-tree would add an
-- index insertion to every invoice. A settle's new row version may land on
-- a later page, widening that page range's summary: the read stays right,
-- and reads a little more. autosummarize has autovacuum summarize each
-- range as it fills.
-- A build that failed half-way leaves an INVALID index: dropped first.
DROP INDEX CONCURRENTLY IF EXISTS invoice_created_at_brin;
-- Not IF NOT EXISTS, which would keep the INVALID index of a failed run:
-- the statement above makes this one re-runnable.
-- squawk-ignore prefer-robust-stmts
CREATE INDEX CONCURRENTLY invoice_created_at_brin ON invoice USING brin (created_at) WITH (autosummarize = on);
