-- 0003: one invoice per key, the rejected status, and the pending completer's
-- bookkeeping (docs/interface.md §4, §7; issue 15 points 1, 2, 4).
--
-- Compatible with the previous release, which may still run while this
-- rolls out: it never writes two invoices under one event_id except in the
-- bug this closes (an event reusing another order's event_id), where its
-- insert now fails with a unique violation instead of opening a second
-- invoice under a key already used; it does not write 'rejected', and it
-- treats a rejected invoice as pending (its charge under the recorded key is
-- refused again, the event goes to the DLQ, its Settle touches only pending
-- rows). The new columns have defaults, so its INSERT (which does not name
-- them) keeps working. The migrator runs this file in one transaction; the
-- unique index blocks invoice writes while it is built.

-- Invoices written by the bug share an event_id: the unique index cannot be
-- built. Stop with a message that says what to do, rather than the bare
-- "could not create unique index".
DO $$
DECLARE
    dup uuid;
    n   bigint;
BEGIN
    SELECT event_id, count(*) INTO dup, n FROM invoice GROUP BY event_id HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'migration 0003: % invoices share event_id % (an event reused another order''s id)', n, dup
            USING HINT = 'List them with: SELECT event_id, order_id, status, created_at FROM invoice WHERE event_id IN '
                || '(SELECT event_id FROM invoice GROUP BY event_id HAVING count(*) > 1) ORDER BY event_id, created_at; '
                || 'keep the oldest invoice of each event_id; each later one was charged under a key the gateway had seen '
                || 'with another body (check its charge at the gateway), and must be settled by hand and then given a '
                || 'fresh UUIDv7 event_id (UPDATE invoice SET event_id = <new id> WHERE order_id = <later order>) before '
                || 'migrating again.';
    END IF;
END
$$;

CREATE UNIQUE INDEX invoice_event_id_key ON invoice (event_id);
DROP INDEX invoice_event_id_idx;

ALTER TABLE invoice DROP CONSTRAINT invoice_status_check;
ALTER TABLE invoice ADD CONSTRAINT invoice_status_check
    CHECK (status IN ('pending', 'charged', 'declined', 'rejected'));

-- The pending completer (infra/postgres.Store.ClaimPending): how many times
-- it has tried an invoice under its current key, and when it may try next.
-- next_resume_at is also its claim: a completer moves it past its pass
-- before calling the gateway, so no other completer takes the invoice
-- meanwhile. NULL: never tried.
ALTER TABLE invoice ADD COLUMN resume_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE invoice ADD COLUMN next_resume_at timestamptz NULL;

-- The completer's claim and the pending gauges read only pending invoices.
CREATE INDEX invoice_pending_updated_at_idx ON invoice (updated_at) WHERE status = 'pending';
