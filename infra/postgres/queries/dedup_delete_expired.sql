-- dedup_delete_expired deletes up to $2 rows of the DEFAULT partition
-- processed before $1, oldest first. The ctids come from the processed_at
-- index in order: a scan from the start of the heap would wade through the
-- dead tuples of every earlier batch, while index entries of deleted rows are
-- marked dead at the first visit and skipped cheaply after.
DELETE FROM processed_event_default
WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM processed_event_default WHERE processed_at < $1 ORDER BY processed_at LIMIT $2))
AND processed_at < $1;
