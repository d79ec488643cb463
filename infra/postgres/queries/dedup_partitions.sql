-- dedup_partitions lists the partitions of processed_event (partitioned by
-- RANGE (event_id), one partition per UTC day:
-- migrations/0002_partition_processed_event.sql) with their bounds as
-- Postgres prints them, by name.
SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'processed_event'::regclass ORDER BY c.relname;
