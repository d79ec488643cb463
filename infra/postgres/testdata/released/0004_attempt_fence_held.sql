-- 0004: one attempt per key at a time, the held status, and the order an
-- event id was first seen with (CONTRACT.md §4, §7; docs/design.md,
-- "Concurrency of money").
--
-- Rollout: the previous release keeps running while this applies and until
-- its pods are replaced. Its statements still work here (the new columns
-- are NULL or have defaults; its INSERTs do not name them), but it takes no
-- attempts: during the rollout an old pod and a new one can still both
-- resume one pending invoice, as two paths could before. It reads a held
-- invoice as final (a duplicate) and never moves it, and it never sends a
-- held key: held is written only by the new release. Nothing here rewrites
-- a table: the new columns are nullable without defaults (processed_event
-- is partitioned; its partitions get the column too), and the one UPDATE
-- touches pending invoices only.

ALTER TABLE invoice DROP CONSTRAINT invoice_status_check;
ALTER TABLE invoice ADD CONSTRAINT invoice_status_check
    CHECK (status IN ('pending', 'charged', 'declined', 'rejected', 'held'));

-- The invoice's attempt: the path holding it may send the key, until
-- attempt_until by Postgres's clock (infra/postgres, sqlReserveGroup).
-- attempt_id tells the holder's settle from anyone else's. NULL: no attempt
-- was ever taken, or the last one ended.
ALTER TABLE invoice ADD COLUMN attempt_id bigint NULL;
ALTER TABLE invoice ADD COLUMN attempt_until timestamptz NULL;

-- When the first attempt under the current key was taken: past half of
-- BILLING_GATEWAY_KEY_TTL the invoice is held instead of sent again.
-- Pending invoices of the previous release may have sent their key any
-- time since it started (updated_at).
ALTER TABLE invoice ADD COLUMN key_sent_at timestamptz NULL;
UPDATE invoice SET key_sent_at = updated_at WHERE status = 'pending';

-- Why an invoice is rejected or held (one line, at most 256 bytes): what
-- `billing invoice resolve` shows a person and the invoice event carries.
ALTER TABLE invoice ADD COLUMN reason text NULL;

-- billing_invoices_held counts these.
CREATE INDEX invoice_held_idx ON invoice (order_id) WHERE status = 'held';

-- The order an event id was first seen with: a replay of that event
-- reopens that order's rejected invoice, never another order's. NULL on
-- rows written before this migration: those ids reopen nothing but the
-- invoice they key, as before.
ALTER TABLE processed_event ADD COLUMN order_id text NULL;
