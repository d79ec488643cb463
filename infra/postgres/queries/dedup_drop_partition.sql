-- dedup_drop_partition drops an expired day partition: the retention's TTL.
-- It takes ACCESS EXCLUSIVE on processed_event for a moment, bounded by the
-- lock timeout (dedup_limits).
DROP TABLE :"partition";
