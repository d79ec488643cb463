-- reserve_settle.sql - what one event does in Postgres, for the pgbench
-- ceiling of `make bench` (bench/cmd/billbench). One run of this script is
-- one pgbench "transaction" and stands for one event, as infra/postgres.Store
-- sends it while events are few (a group of one): the reserve as one
-- pipeline (sqlReserveOne: dedup row, invoice insert or reopen, the attempt
-- taken or the invoice held; then sqlInvoicesForUpdate; one implicit
-- transaction committed at the pipeline's Sync, as a pgx batch is), then
-- the settle, sqlSettleOne with its invoice event, on its own and committed
-- durably: the yardstick kept from before the store's settles stopped
-- waiting for their WAL flush (sqlSettlePrelude), so that targets set
-- against it stay comparable. The gateway call between them is not
-- modelled: this is the database's ceiling.
--
-- Generated from the store's statements, each parameter replaced by a
-- value (infra/postgres/benchscripts_test.go): do not edit; run
-- go test ./infra/postgres -run TestBenchScripts -update
-- after changing a statement. Run with -M prepared, as pgx caches its
-- statements.
\set oid random(1, 9223372036854775806)
\startpipeline
WITH dedup AS (
		INSERT INTO processed_event (event_id, consumer_group, order_id) VALUES (((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid), ('pgbench'), ('pgb-' || :client_id::text || '-' || :oid::text))
		ON CONFLICT (event_id, consumer_group) DO NOTHING
		RETURNING event_id
	), opened AS (
		INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, attempt_id, attempt_until, key_sent_at)
		SELECT ('pgb-' || :client_id::text || '-' || :oid::text)::text, ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid)::uuid, ('cus-' || :client_id::text)::text, (12990)::bigint, ('EUR')::text, 'pending', (:oid)::bigint, now() + make_interval(secs => (15)::float8), now() FROM dedup
		ON CONFLICT DO NOTHING
		RETURNING order_id
	), reopened AS (
		UPDATE invoice SET event_id = ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid), customer_id = ('cus-' || :client_id::text), amount = (12990), currency = ('EUR'), status = 'pending',
			charge_id = NULL, reason = NULL, resume_attempts = 0, next_resume_at = NULL, updated_at = now(), reopens = reopens + 1,
			attempt_id = (:oid), attempt_until = now() + make_interval(secs => (15)::float8), key_sent_at = now()
		WHERE order_id = ('pgb-' || :client_id::text || '-' || :oid::text) AND status = 'rejected'
			AND (event_id = ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid) OR EXISTS (SELECT FROM dedup)
				OR EXISTS (SELECT FROM processed_event p WHERE p.event_id = ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid) AND p.consumer_group = ('pgbench') AND p.order_id = ('pgb-' || :client_id::text || '-' || :oid::text)))
			AND NOT EXISTS (SELECT FROM invoice other WHERE other.event_id = ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid) AND other.order_id <> ('pgb-' || :client_id::text || '-' || :oid::text))
		RETURNING order_id
	), taken AS (
		UPDATE invoice SET attempt_id = (:oid), attempt_until = now() + make_interval(secs => (15)::float8), key_sent_at = coalesce(key_sent_at, now())
		WHERE order_id = ('pgb-' || :client_id::text || '-' || :oid::text) AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
			AND ((43200)::float8 = 0 OR key_sent_at IS NULL OR key_sent_at > now() - make_interval(secs => (43200)::float8))
		RETURNING order_id
	), held AS (
		UPDATE invoice SET status = 'held', reason = ('bench'), attempt_until = NULL, updated_at = now()
		WHERE order_id = ('pgb-' || :client_id::text || '-' || :oid::text) AND status = 'pending' AND (attempt_until IS NULL OR attempt_until <= now())
			AND (43200)::float8 > 0 AND key_sent_at <= now() - make_interval(secs => (43200)::float8)
		RETURNING *
	), held_event AS (
		INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
		SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULL FROM held WHERE (true)::boolean ON CONFLICT (event_id) DO NOTHING
	)
	SELECT EXISTS (SELECT FROM dedup), EXISTS (SELECT FROM reopened), EXISTS (SELECT FROM held);
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens, coalesce(attempt_id, 0),
		greatest(extract(epoch FROM attempt_until - now()), 0)::float8
		FROM invoice WHERE order_id = ANY ((ARRAY[('pgb-' || :client_id::text || '-' || :oid::text)])::text[]) ORDER BY order_id FOR UPDATE;
\endpipeline
WITH moved AS (
		UPDATE invoice SET status = ('charged'), charge_id = NULLIF(('ch_pgbench'), ''), reason = NULLIF((''), ''),
			updated_at = now(), attempt_until = NULL
		WHERE order_id = ('pgb-' || :client_id::text || '-' || :oid::text) AND event_id = ((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid) AND status = 'pending'
			AND (attempt_id = (:oid) OR attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), settled_event AS (
		INSERT INTO invoice_outbox (event_id, order_id, status, customer_id, amount, currency, idempotency_key, charge_id, reason, traceparent)
		SELECT invoice_event_id(order_id, event_id, status, reopens), order_id, status, customer_id, amount, currency, event_id, charge_id, reason, NULLIF((''), '') FROM moved WHERE (true)::boolean ON CONFLICT (event_id) DO NOTHING
	)
	SELECT count(*) FROM moved;
