-- reserve_settle.sql - what one event does in Postgres, for the pgbench
-- ceiling of `make bench` (bench/cmd/billbench). One run of this script is
-- one pgbench "transaction" and stands for one event, in the shape
-- infra/postgres.Store gives it: the reserve transaction as one pipeline
-- (three statements, one implicit transaction committed at the pipeline's
-- Sync, as a pgx batch is), then the settle UPDATE on its own. The gateway
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
INSERT INTO processed_event (event_id, consumer_group)
    VALUES ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid, 'pgbench')
    ON CONFLICT (event_id, consumer_group) DO NOTHING;
INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, charge_id)
    VALUES ('pgb-' || :client_id::text || '-' || :oid::text, (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid,
            'cus-' || :client_id::text, 12990, 'EUR', 'pending', NULLIF('', ''))
    ON CONFLICT (order_id) DO NOTHING;
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), created_at
    FROM invoice WHERE order_id = 'pgb-' || :client_id::text || '-' || :oid::text FOR UPDATE;
\endpipeline
UPDATE invoice SET status = 'charged', charge_id = NULLIF('ch_pgbench', ''), updated_at = now()
    WHERE order_id = 'pgb-' || :client_id::text || '-' || :oid::text AND status = 'pending';
