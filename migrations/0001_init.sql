-- 0001: the tables of docs/interface.md §7.

-- Dedup guard (docs/design.md, "Three lines of defence"): one row per event and
-- consumer group, written in the same transaction as the invoice. A plain
-- table for now; partitioning by RANGE (event_id) comes in its own migration,
-- keeping this name, these columns and this primary key.
CREATE TABLE processed_event (
    event_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, consumer_group)
);

-- Retention deletes by age.
CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at);

-- One invoice per order (second line of defence). event_id is the event that
-- opened the invoice; its value is the charge's Idempotency-Key.
CREATE TABLE invoice (
    order_id    text        PRIMARY KEY,
    event_id    uuid        NOT NULL,
    customer_id text        NOT NULL,
    amount      bigint      NOT NULL CHECK (amount > 0),
    currency    text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('pending', 'charged', 'declined')),
    charge_id   text        NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX invoice_event_id_idx ON invoice (event_id);
