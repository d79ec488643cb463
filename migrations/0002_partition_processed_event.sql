-- 0002: processed_event partitioned by RANGE (event_id).
--
-- The style guide partitions by processed_at with PRIMARY KEY (event_id,
-- processed_at): the same event_id processed on two days is then two rows,
-- and dedup silently stops working (docs/design.md). Here the partition key is the
-- event id itself. A UUIDv7 starts with its 48-bit Unix millisecond
-- timestamp and Postgres compares uuids byte by byte, so one UTC day is one
-- range of ids, [floor(day), floor(day + 1)), where floor(t) is t's
-- millisecond timestamp followed by 80 zero bits. PRIMARY KEY (event_id,
-- consumer_group) contains the partition key and stays one global guard.
--
-- Ids outside every day partition (a producer's skewed clock, an old
-- replay, an id that is not v7) land in the DEFAULT partition: still
-- deduplicated, and expired there by processed_at. Day partitions are
-- created ahead and dropped once expired by infra/postgres.DedupMaintainer;
-- this migration creates the days around now so that a fresh database takes
-- events into day partitions before the maintainer first runs. Both compute
-- the same bounds and names (processed_event_pYYYYMMDD, UTC).
--
-- The migrator runs this file in one transaction, once.

ALTER TABLE processed_event RENAME TO processed_event_0001;
ALTER TABLE processed_event_0001 RENAME CONSTRAINT processed_event_pkey TO processed_event_0001_pkey;
ALTER INDEX processed_event_processed_at_idx RENAME TO processed_event_0001_processed_at_idx;

CREATE TABLE processed_event (
    event_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, consumer_group)
) PARTITION BY RANGE (event_id);

-- Expiry in the DEFAULT partition deletes by age, in batches.
CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at);

CREATE TABLE processed_event_default PARTITION OF processed_event DEFAULT;

-- Yesterday to three days ahead (UTC), as the maintainer would make them.
DO $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    d     date;
BEGIN
    FOR d IN SELECT generate_series(today - 1, today + 3, interval '1 day')::date LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF processed_event FOR VALUES FROM (%L) TO (%L)',
            'processed_event_p' || to_char(d, 'YYYYMMDD'),
            (lpad(to_hex((extract(epoch FROM d::timestamp) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid,
            (lpad(to_hex((extract(epoch FROM (d + 1)::timestamp) * 1000)::bigint), 12, '0') || repeat('0', 20))::uuid);
    END LOOP;
END
$$;

-- Rows of the foundation's table go to their day partition or to DEFAULT.
INSERT INTO processed_event (event_id, consumer_group, processed_at)
SELECT event_id, consumer_group, processed_at FROM processed_event_0001;

DROP TABLE processed_event_0001;
