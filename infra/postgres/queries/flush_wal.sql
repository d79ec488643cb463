-- flush_wal is a transaction that commits synchronously, so that it returns
-- once the WAL is flushed past its commit record, hence past the commit of
-- every transaction its snapshot, which it returns, saw committed. It must
-- write WAL of its own for that: Postgres commits a transaction that wrote
-- none without waiting, whatever synchronous_commit says. A transactional
-- logical decoding message is the smallest such write (a record of a few
-- bytes, no table, any role may emit it, at any wal_level; a logical decoding
-- consumer sees it under the prefix billing.outbox-flush), and it is written
-- only when the outbox holds a row, so an idle relay writes nothing. Its
-- second column says whether it wrote one. One simple-protocol message
-- (several statements: the only file that holds more than one), one round
-- trip, also through PgBouncer in transaction mode. docs/design.md, "Billing
-- publishes what it decided (the outbox)".
BEGIN; SET LOCAL synchronous_commit = on;
SELECT pg_current_snapshot()::text,
	CASE WHEN EXISTS (SELECT FROM invoice_outbox) THEN pg_logical_emit_message(true, 'billing.outbox-flush', '') END IS NOT NULL;
COMMIT;
