-- dedup_count_partition counts the rows of :"partition" and returns when the
-- newest was processed: a partition holding a row processed within the
-- retention (an old event replayed) is kept.
SELECT count(*), max(processed_at) FROM :"partition";
