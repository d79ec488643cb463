-- reserve_settle.sql - what one event does in Postgres, for the pgbench
-- ceiling of `make bench` (bench/cmd/billbench). One run of this script is
-- one pgbench "transaction" and stands for one event, in the shape
-- infra/postgres.Store gives it: the reserve transaction as one pipeline
-- (two statements: the dedup insert, invoice insert and reopen of sqlReserve
-- in one, then the read FOR UPDATE; one implicit transaction committed at
-- the pipeline's Sync, as a pgx batch is), then the settle UPDATE on its own. The gateway
-- call between them is not modelled: this is the database's ceiling. The
-- statements are those of infra/postgres/repo.go; run with -M prepared, as
-- pgx caches its statements.
--
-- Order ids are unique: the client id and a random bigint. The event id is
-- derived from them, so the dedup row and the invoice carry the same one; it
-- is UUIDv7-shaped (the driver passes -D ms=<now in Unix ms> for its first 48
-- bits), so it lands in today's partition of processed_event, as the
-- service's events do.
\set oid random(1, 9223372036854775806)
\startpipeline
WITH dedup AS (
    INSERT INTO processed_event (event_id, consumer_group)
    VALUES ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid, 'pgbench')
    ON CONFLICT (event_id, consumer_group) DO NOTHING
    RETURNING event_id
), opened AS (
    INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
    SELECT 'pgb-' || :client_id::text || '-' || :oid::text, event_id, 'cus-' || :client_id::text, 12990, 'EUR', 'pending' FROM dedup
    ON CONFLICT DO NOTHING
    RETURNING order_id
), reopened AS (
    UPDATE invoice SET event_id = (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid,
        customer_id = 'cus-' || :client_id::text, amount = 12990, currency = 'EUR', status = 'pending',
        charge_id = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now()
    WHERE order_id = 'pgb-' || :client_id::text || '-' || :oid::text AND status = 'rejected'
        AND (event_id = (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid
             OR EXISTS (SELECT FROM dedup))
        AND NOT EXISTS (SELECT FROM invoice other
            WHERE other.event_id = (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid
              AND other.order_id <> 'pgb-' || :client_id::text || '-' || :oid::text)
    RETURNING order_id
)
SELECT EXISTS (SELECT FROM dedup), EXISTS (SELECT FROM reopened);
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), created_at
    FROM invoice WHERE order_id = 'pgb-' || :client_id::text || '-' || :oid::text FOR UPDATE;
\endpipeline
UPDATE invoice SET status = 'charged', charge_id = NULLIF('ch_pgbench', ''), updated_at = now()
    WHERE order_id = 'pgb-' || :client_id::text || '-' || :oid::text
      AND event_id = (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid
      AND status = 'pending';
