-- reserve_settle_grouped.sql - what a group of :g concurrent events does in
-- Postgres once issue 18 groups the database work, for the second pgbench
-- ceiling of `make bench` (bench/cmd/billbench). One run of this script is
-- one pgbench "transaction" and stands for :g events (the driver passes
-- -D g=<G>), so its events/s is tps × G. Beside it the report keeps the
-- ceiling of bench/reserve_settle.sql, the per-event shape, as the yardstick.
--
-- The shape: the reserves of the group as one pipeline (one implicit
-- transaction committed at its Sync): the set-based dedup insert, invoice
-- insert and reopen, then one read FOR UPDATE of the group's invoices in
-- order_id order; then the settles of the group as one pipeline, committed
-- with synchronous_commit off for that transaction only. Each pipeline
-- starts with the service's prelude (infra/postgres/repo.go), which also has
-- its statements planned once and by their indexes. The gateway call between
-- them is not modelled. The statements are the service's, with the
-- group built server-side by generate_series where the service unnests its
-- array parameters; run with -M prepared, as pgx caches its statements.
--
-- Order ids are unique: the client id and a random bigint plus the event's
-- place in the group (the base leaves room for it below the bigint maximum).
-- The event id is derived from them as in reserve_settle.sql, so the dedup
-- row and the invoice carry the same one; it is UUIDv7-shaped (-D ms=<now in
-- Unix ms> for its first 48 bits), so it lands in today's partition of
-- processed_event, as the service's events do.
\set base random(1, 9223372036854775806 - 100000)
\startpipeline
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
    set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true);
WITH input AS (
    SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text AS order_id,
        (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || (:base::bigint + g)::text), 13))::uuid AS event_id,
        'cus-' || :client_id::text AS customer_id, 12990::bigint AS amount, 'EUR'::text AS currency
    FROM generate_series(1, :g::int) AS g
), dedup AS (
    INSERT INTO processed_event (event_id, consumer_group) SELECT event_id, 'pgbench' FROM input
    ON CONFLICT (event_id, consumer_group) DO NOTHING
    RETURNING event_id
), opened AS (
    INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
    SELECT i.order_id, i.event_id, i.customer_id, i.amount, i.currency, 'pending' FROM input i JOIN dedup d USING (event_id)
    ON CONFLICT DO NOTHING
    RETURNING order_id
), reopened AS (
    UPDATE invoice inv SET event_id = i.event_id, customer_id = i.customer_id, amount = i.amount, currency = i.currency,
        status = 'pending', charge_id = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now()
    FROM input i
    WHERE inv.order_id = i.order_id AND inv.status = 'rejected'
        AND (inv.event_id = i.event_id OR EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id))
        AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = i.event_id AND other.order_id <> i.order_id)
    RETURNING inv.order_id
)
SELECT i.event_id, EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id),
       EXISTS (SELECT FROM reopened r WHERE r.order_id = i.order_id) FROM input i;
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), created_at
    FROM invoice WHERE order_id = ANY (ARRAY(SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text
        FROM generate_series(1, :g::int) AS g)) ORDER BY order_id FOR UPDATE;
\endpipeline
\startpipeline
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
    set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
    set_config('synchronous_commit', 'off', true);
UPDATE invoice SET status = u.status, charge_id = NULLIF(u.charge_id, ''), updated_at = now()
    FROM (SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text AS order_id,
            (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || (:base::bigint + g)::text), 13))::uuid AS event_id,
            'charged'::text AS status, 'ch_pgbench'::text AS charge_id
        FROM generate_series(1, :g::int) AS g) AS u
    WHERE invoice.order_id = u.order_id AND invoice.event_id = u.event_id AND invoice.status = 'pending'
    RETURNING invoice.order_id;
\endpipeline
