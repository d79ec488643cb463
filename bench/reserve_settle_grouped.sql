-- reserve_settle_grouped.sql - what a group of :g concurrent events does in
-- Postgres, as infra/postgres.Store groups their database work, for the
-- grouped pgbench ceiling of `make bench` (bench/cmd/billbench). One run of
-- this script is one pgbench "transaction" and stands for :g events (the
-- driver passes -D g=<G>), so its events/s is tps x G. Beside it the report
-- keeps the ceiling of bench/reserve_settle.sql, the per-event shape, as the
-- yardstick.
--
-- The shape: the reserves of the group as one pipeline (one implicit
-- transaction committed at its Sync): sqlReservePrelude, sqlReserveGroup
-- (dedup rows, invoice inserts and reopens, attempts taken or invoices
-- held), then sqlInvoicesForUpdate of the group's invoices in order_id
-- order; then the settles of the group as one pipeline: sqlSettlePrelude,
-- whose commit does not wait for its WAL flush, and sqlSettleGroup with
-- their invoice events. The gateway call between them is not modelled.
--
-- Generated from the store's statements, each parameter replaced by a
-- value (infra/postgres/benchscripts_test.go): do not edit; run
-- go test ./infra/postgres -run TestBenchScripts -update
-- after changing a statement. The store unnests array parameters, which
-- pgbench builds server-side with generate_series; run with -M prepared, as
-- pgx caches its statements.
\set base random(1, 9223372036854775806 - 100000)
\startpipeline
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
		set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true);
WITH input AS (
		SELECT * FROM unnest((ARRAY(SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text FROM generate_series(1, :g::int) AS g))::text[], (ARRAY(SELECT (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || (:base::bigint + g)::text), 13))::uuid FROM generate_series(1, :g::int) AS g))::uuid[], (array_fill(('cus-' || :client_id::text)::text, ARRAY[:g::int]))::text[], (array_fill((12990)::bigint, ARRAY[:g::int]))::bigint[], (array_fill(('EUR')::text, ARRAY[:g::int]))::text[], (ARRAY(SELECT :base::bigint + g FROM generate_series(1, :g::int) AS g))::bigint[])
			AS t(order_id, event_id, customer_id, amount, currency, attempt_id)
	), dedup AS (
		INSERT INTO processed_event (event_id, consumer_group, order_id) SELECT event_id, ('pgbench'), order_id FROM input
		ON CONFLICT (event_id, consumer_group) DO NOTHING
		RETURNING event_id
	), opened AS (
		INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, attempt_id, attempt_until, key_sent_at)
		SELECT i.order_id, i.event_id, i.customer_id, i.amount, i.currency, 'pending', i.attempt_id, now() + make_interval(secs => (15)::float8), now()
		FROM input i JOIN dedup d USING (event_id)
		ON CONFLICT DO NOTHING
		RETURNING order_id
	), reopened AS (
		UPDATE invoice inv SET event_id = i.event_id, customer_id = i.customer_id, amount = i.amount, currency = i.currency,
			status = 'pending', charge_id = NULL, reason = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now(),
			reopens = inv.reopens + 1, attempt_id = i.attempt_id, attempt_until = now() + make_interval(secs => (15)::float8), key_sent_at = now()
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'rejected'
			AND (inv.event_id = i.event_id OR EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id)
				OR EXISTS (SELECT FROM processed_event p WHERE p.event_id = i.event_id AND p.consumer_group = ('pgbench') AND p.order_id = i.order_id))
			AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = i.event_id AND other.order_id <> i.order_id)
		RETURNING inv.order_id
	), taken AS (
		UPDATE invoice inv SET attempt_id = i.attempt_id, attempt_until = now() + make_interval(secs => (15)::float8),
			key_sent_at = coalesce(inv.key_sent_at, now())
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'pending' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
			AND ((43200)::float8 = 0 OR inv.key_sent_at IS NULL OR inv.key_sent_at > now() - make_interval(secs => (43200)::float8))
		RETURNING inv.order_id
	), held AS (
		UPDATE invoice inv SET status = 'held', reason = ('bench'), attempt_until = NULL, updated_at = now()
		FROM input i
		WHERE inv.order_id = i.order_id AND inv.status = 'pending' AND (inv.attempt_until IS NULL OR inv.attempt_until <= now())
			AND (43200)::float8 > 0 AND inv.key_sent_at <= now() - make_interval(secs => (43200)::float8)
		RETURNING inv.*
	), held_event AS (
		INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
		SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM held WHERE (true)::boolean ON CONFLICT (event_id) DO NOTHING
	)
	SELECT i.order_id, EXISTS (SELECT FROM dedup d WHERE d.event_id = i.event_id),
		EXISTS (SELECT FROM reopened r WHERE r.order_id = i.order_id),
		EXISTS (SELECT FROM held h WHERE h.order_id = i.order_id) FROM input i;
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens, coalesce(attempt_id, 0),
		greatest(extract(epoch FROM attempt_until - now()), 0)::float8
		FROM invoice WHERE order_id = ANY ((ARRAY(SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text FROM generate_series(1, :g::int) AS g))::text[]) ORDER BY order_id FOR UPDATE;
\endpipeline
\startpipeline
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
		set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), set_config('synchronous_commit', 'off', true);
WITH u AS (
		SELECT * FROM unnest((ARRAY(SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text FROM generate_series(1, :g::int) AS g))::text[], (ARRAY(SELECT (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || (:base::bigint + g)::text), 13))::uuid FROM generate_series(1, :g::int) AS g))::uuid[], (ARRAY(SELECT :base::bigint + g FROM generate_series(1, :g::int) AS g))::bigint[], (array_fill(('charged')::text, ARRAY[:g::int]))::text[], (array_fill(('ch_pgbench')::text, ARRAY[:g::int]))::text[], (array_fill(('')::text, ARRAY[:g::int]))::text[], (array_fill(('')::text, ARRAY[:g::int]))::text[])
			AS u(order_id, event_id, attempt_id, status, charge_id, reason, traceparent)
	), moved AS (
		UPDATE invoice SET status = u.status, charge_id = NULLIF(u.charge_id, ''), reason = NULLIF(u.reason, ''),
			updated_at = now(), attempt_until = NULL
		FROM u
		WHERE invoice.order_id = u.order_id AND invoice.event_id = u.event_id AND invoice.status = 'pending'
			AND (invoice.attempt_id = u.attempt_id OR invoice.attempt_until IS NULL OR invoice.attempt_until <= now())
		RETURNING invoice.*, u.traceparent AS cause
	), settled_event AS (
		INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
		SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULLIF(cause, '') FROM moved WHERE (true)::boolean ON CONFLICT (event_id) DO NOTHING
	)
	SELECT order_id FROM moved;
\endpipeline
