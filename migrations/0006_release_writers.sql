-- billing:no-transaction
-- squawk-disable-assume-in-transaction
-- 0006: every writer of invoice keeps the money rules, also a release that
-- does not know them (docs/interface.md §4, §9, §10; docs/design.md, "Releases";
-- CHANGELOG.md, 1.2.0).
--
-- During a rollout, and after a rollback, releases that predate a rule
-- write invoice beside this one. 1.1.0 (e6198e4) takes attempts, keeps
-- key_sent_at and reopens, and writes its own outbox rows; 1.0.0 (8072a37)
-- does none of it: it opens, settles, reopens and resumes invoices without
-- an attempt, and publishes nothing. The triggers below see every writer
-- and make each write keep the rules:
--
--   - every transition into charged, declined, rejected or held that a
--     writer other than this release makes is published with its §9 id
--     (invoice_event_id: order, key, status, reopens), once: a writer that
--     writes its own row (1.1.0) gets no second one (ON CONFLICT), and
--     transitions made before this migration are not published;
--   - reopens and key_sent_at stay right: a 1.0.0 reopen counts, and an
--     invoice whose key a writer is about to send has key_sent_at;
--   - the fence holds against writers that do not know it: a write of
--     1.0.0 that would send a key (its insert, its reopen, its completer's
--     claim, its resume of a pending invoice by a redelivered event) counts
--     as an attempt lasting the longest attempt any configuration allows
--     (invoice_legacy_attempt_life), recorded as attempt_id -1, so no
--     fence-aware path takes, settles or reopens the invoice meanwhile; and
--     its moves out of pending that could let another key follow
--     (rejected) are not applied while any attempt may be in flight, nor
--     its settles while a fence-aware release's attempt is (that attempt
--     settles the key's outcome itself).
--
-- How a writer is told: this release stamps written_xact with its own
-- transaction's id in every statement that writes invoice, so the WHEN
-- clauses skip the triggers for it at the cost of a comparison; a statement
-- that names attempt_id or attempt_until (every status change and attempt
-- of 1.1.0) is fence-aware and only stamped; what is left is 1.0.0 (or a
-- person's psql), which never names them. 1.0.0's completer claim and
-- 1.1.0's change the same columns; the trigger tells them apart by the
-- claim's text, which a released binary never changes.
--
-- What no trigger can see: 1.0.0 resuming a pending invoice for a
-- redelivered event that is not the invoice's own key writes nothing that
-- names the invoice. That is one reason 1.2.0 does not run beside 1.0.0
-- (its pods wait while a 1.0.0 member is in the consumer group), and why
-- `billing migrate` refuses a 1.0.0 database without --allow-no-rollback:
-- these rules are the second line.
--
-- Each statement takes its locks on its own (no-transaction file), under
-- the migrator's lock_timeout, and can run again after any of them ran.

-- This release's mark on the invoices its statements write: its
-- transaction's id. Nullable without a default: no rewrite, and 1.0.0's
-- INSERT leaves it empty.
ALTER TABLE invoice ADD COLUMN IF NOT EXISTS written_xact xid8 NULL;

-- The longest an attempt of a release that records none may last: the
-- longest BILLING_PAYMENT_TIMEOUT the configuration allows (60 s) plus
-- order.AttemptMargin (5 s). The trigger cannot know the writer's timeout.
CREATE OR REPLACE FUNCTION invoice_legacy_attempt_life() RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT interval '65 seconds' $$;

-- A statement that names the attempt: fence-aware, it keeps every rule
-- itself (1.1.0). Stamped, so the triggers after this one skip it.
CREATE OR REPLACE FUNCTION invoice_fence_aware() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.written_xact := pg_current_xact_id();
    RETURN NEW;
END
$$;

-- The invoice event of a transition that its writer does not publish
-- (1.0.0, psql), written in the transition's transaction under its §9 id
-- (invoice_event_id, migrations/0005); ON CONFLICT keeps it once. Called
-- by the BEFORE triggers below, whose row is final by then: an AFTER
-- trigger would cost every write of this release the old row's fetch for
-- its WHEN clause, skipped or not.
CREATE OR REPLACE FUNCTION invoice_publish(inv invoice) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason)
    SELECT invoice_event_id(inv.order_id, inv.event_id, inv.status, inv.reopens), inv.order_id, inv.status, inv.customer_id,
        inv.amount, inv.currency, inv.event_id, inv.charge_id, inv.reason
    WHERE inv.status IN ('charged', 'declined', 'rejected', 'held')
    ON CONFLICT (event_id) DO NOTHING
$$;

-- What 1.0.0 is about to send: the key of order's pending invoice, an
-- attempt of its own (legacyAttempt, -1) that lasts the longest any
-- configuration allows and that takes over this release's, whose settle
-- then waits for it (docs/design.md, "Releases").
CREATE OR REPLACE FUNCTION invoice_legacy_sends(order_of text) RETURNS void
LANGUAGE sql AS $$
    UPDATE invoice SET attempt_id = -1,
        attempt_until = greatest(attempt_until, now() + invoice_legacy_attempt_life()),
        key_sent_at = coalesce(key_sent_at, now()), written_xact = pg_current_xact_id()
    WHERE order_id = order_of AND status = 'pending'
$$;

-- An insert that takes no attempt (1.0.0's reserve): its writer sends the
-- key next, of this invoice, or, when the order has one pending already
-- (the insert then does nothing, ON CONFLICT), of that one.
CREATE OR REPLACE FUNCTION invoice_legacy_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM invoice_legacy_sends(NEW.order_id);
    IF NEW.status = 'pending' THEN
        NEW.attempt_id := -1;
        NEW.attempt_until := now() + invoice_legacy_attempt_life();
        NEW.key_sent_at := coalesce(NEW.key_sent_at, now());
    ELSE
        -- An invoice written final at once (psql; no release does it).
        PERFORM invoice_publish(NEW);
    END IF;
    RETURN NEW;
END
$$;

-- An update that does not name the attempt (1.0.0's settle, reopen and
-- claim; a person's psql).
CREATE OR REPLACE FUNCTION invoice_legacy_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    alive  boolean := coalesce(OLD.attempt_until > now(), false);
    fenced boolean := alive AND coalesce(OLD.attempt_id > 0, false);
BEGIN
    IF OLD.status = 'pending' AND NEW.status <> 'pending' THEN
        -- Out of pending. rejected (and held) let another key follow: not
        -- while any attempt under this one may be in flight, the writer's
        -- own included, which cannot be told from another's (the invoice
        -- stays pending, and is resumed under its key once the attempt has
        -- ended; 1.0.0 dead-letters the event whatever its settle did).
        -- charged and declined end the order under this key, and an
        -- attempt still in flight under it is answered the same by the
        -- gateway: applied, unless a fence-aware release's attempt is
        -- alive, which settles the key's outcome itself.
        IF (NEW.status IN ('rejected', 'held') AND alive) OR (NEW.status IN ('charged', 'declined') AND fenced) THEN
            RETURN NULL;
        END IF;
        IF NEW.status = 'rejected' AND NEW.reason IS NULL THEN
            NEW.reason := 'the gateway refused the charge (recorded by a release that keeps no reason)';
        END IF;
        PERFORM invoice_publish(NEW);
        RETURN NEW;
    END IF;
    IF NEW.status = 'pending' AND (OLD.status <> 'pending' OR NEW.event_id IS DISTINCT FROM OLD.event_id) THEN
        -- Back to pending, or under another key: a reopen, whose writer
        -- sends the key next. Never while an attempt under the old key may
        -- be in flight: the writer is told to try again later (1.0.0 takes
        -- a serialization failure as transient: the event retries).
        IF alive THEN
            RAISE EXCEPTION 'invoice %: an attempt under key % may still be in flight until %', OLD.order_id, OLD.event_id, OLD.attempt_until
                USING ERRCODE = 'serialization_failure';
        END IF;
        NEW.reopens := OLD.reopens + 1;
        NEW.reason := NULL;
        NEW.key_sent_at := CASE WHEN OLD.status = 'held' AND NEW.event_id = OLD.event_id THEN coalesce(OLD.key_sent_at, now()) ELSE now() END;
        NEW.attempt_id := -1;
        NEW.attempt_until := now() + invoice_legacy_attempt_life();
        RETURN NEW;
    END IF;
    IF NEW.status <> 'pending' AND NEW.status IS DISTINCT FROM OLD.status THEN
        -- From one final status to another (a person's psql).
        PERFORM invoice_publish(NEW);
        RETURN NEW;
    END IF;
    IF NEW.status = 'pending' AND current_query() LIKE 'UPDATE invoice SET resume_attempts = resume_attempts + 1,%' THEN
        -- 1.0.0's pending completer claiming the invoice: it sends the key
        -- next.
        NEW.attempt_id := -1;
        NEW.attempt_until := greatest(OLD.attempt_until, now() + invoice_legacy_attempt_life());
        NEW.key_sent_at := coalesce(OLD.key_sent_at, now());
    END IF;
    RETURN NEW;
END
$$;

-- A reserve that records no order for its event (1.0.0's): a redelivered
-- event resumes the invoice it keys, sending the key next.
CREATE OR REPLACE FUNCTION processed_event_legacy_reserve() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM invoice_legacy_sends(order_id) FROM invoice WHERE event_id = NEW.event_id AND status = 'pending';
    RETURN NEW;
END
$$;

-- The triggers of invoice, created together (one short lock). BEFORE
-- triggers run in name order: the fence-aware stamp first, so the legacy
-- ones skip what it stamped. A BEFORE INSERT trigger runs also for a row
-- that ON CONFLICT then leaves out.
DO $$
BEGIN
    DROP TRIGGER IF EXISTS invoice_10_fence_aware ON invoice;
    DROP TRIGGER IF EXISTS invoice_20_legacy_insert ON invoice;
    DROP TRIGGER IF EXISTS invoice_20_legacy_update ON invoice;
    CREATE TRIGGER invoice_10_fence_aware BEFORE UPDATE OF attempt_id, attempt_until ON invoice FOR EACH ROW
        WHEN (NEW.written_xact IS DISTINCT FROM pg_current_xact_id()) EXECUTE FUNCTION invoice_fence_aware();
    CREATE TRIGGER invoice_20_legacy_insert BEFORE INSERT ON invoice FOR EACH ROW
        WHEN (NEW.written_xact IS DISTINCT FROM pg_current_xact_id() AND NEW.attempt_until IS NULL)
        EXECUTE FUNCTION invoice_legacy_insert();
    CREATE TRIGGER invoice_20_legacy_update BEFORE UPDATE ON invoice FOR EACH ROW
        WHEN (NEW.written_xact IS DISTINCT FROM pg_current_xact_id()) EXECUTE FUNCTION invoice_legacy_update();
END
$$;

-- processed_event is partitioned: the trigger is cloned to each partition,
-- those made later included.
DO $$
BEGIN
    DROP TRIGGER IF EXISTS processed_event_legacy_reserve ON processed_event;
    CREATE TRIGGER processed_event_legacy_reserve BEFORE INSERT ON processed_event FOR EACH ROW
        WHEN (NEW.order_id IS NULL) EXECUTE FUNCTION processed_event_legacy_reserve();
END
$$;

-- Pending invoices that 1.0.0 opened or reopened before the triggers
-- existed (after 0004 gave invoice the column) have no key_sent_at: their
-- key may have been sent any time since it started (updated_at). Final
-- invoices of that time keep theirs empty: history.
UPDATE invoice SET key_sent_at = updated_at, written_xact = pg_current_xact_id()
WHERE status = 'pending' AND key_sent_at IS NULL;
