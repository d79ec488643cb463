-- 0005: the transactional outbox of invoice events (docs/interface.md §9;
-- docs/design.md, "Billing publishes what it decided").
--
-- Every statement that moves an invoice into charged, declined, rejected or
-- held writes the transition's event here in the same transaction
-- (infra/postgres, repo.go); the relay of every pod publishes the rows to
-- BILLING_KAFKA_INVOICE_TOPIC and deletes them (infra/postgres, outbox.go).
-- Rollout: the previous release writes no events (its transitions during
-- the rollout are not published); it does not read this table.

-- reopens counts the times the invoice went back to pending after a
-- decision: a rejected invoice reopened by an event, a held one resumed by
-- a person (billing invoice resolve --resume). A status can come back under
-- the same key only across such a return (held, rejected by a person,
-- reopened by the replay of its event, held again), so the count tells the
-- two transitions apart; it changes only in the reserve's and the
-- person's transactions, which are durable, never in a settle that a crash
-- may lose.
ALTER TABLE invoice ADD COLUMN reopens integer NOT NULL DEFAULT 0;

-- invoice_event_id is the event id of a transition: a UUIDv7 whose 48-bit
-- timestamp is the key's (the OrderConfirmed event's, itself a UUIDv7) and
-- whose other 74 bits are SHA-256 of (order, key, status, reopens; the
-- count only when not 0). A function of the transition, never of the
-- moment it is written: a settle lost in a crash and redone, or a relay
-- that publishes and dies before deleting, publishes the same id again,
-- and consumers deduplicate by it; a status reached again after a reopen
-- is another transition, with another id.
-- core/order.InvoiceEventID computes the same (TestInvoiceEventIDMatchesSQL).
CREATE FUNCTION invoice_event_id(order_id text, idempotency_key uuid, status text, reopens integer) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(uuid_send(idempotency_key) FROM 1 FOR 6)
        || set_byte(set_byte(substring(h FROM 1 FOR 10), 0, (get_byte(h, 0) & 15) | 112), 2, (get_byte(h, 2) & 63) | 128),
        'hex')::uuid
    FROM sha256(convert_to(order_id || chr(31) || idempotency_key::text || chr(31) || status
        || CASE WHEN reopens = 0 THEN '' ELSE chr(31) || reopens::text END, 'UTF8')) AS h
$$;

CREATE TABLE invoice_outbox (
    -- the publish order: a later transition of an order commits after the
    -- earlier one (the invoice's row lock orders them), so it gets a larger id
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL UNIQUE,
    order_id        text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('charged', 'declined', 'rejected', 'held')),
    customer_id     text        NOT NULL,
    amount          bigint      NOT NULL,
    currency        text        NOT NULL,
    idempotency_key uuid        NOT NULL,
    charge_id       text        NULL,
    reason          text        NULL,
    traceparent     text        NULL,
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    -- the writing transaction: the relay publishes a row only once a
    -- flush whose snapshot saw this transaction committed has returned
    -- (the settles commit without waiting for their flush)
    xact            xid8        NOT NULL DEFAULT pg_current_xact_id()
);

-- The relay publishes only the oldest row of each order (so one order's
-- events leave in the order of its transitions, whichever pod holds which
-- row), and looks it up by order.
CREATE INDEX invoice_outbox_order_id_idx ON invoice_outbox (order_id, id);
