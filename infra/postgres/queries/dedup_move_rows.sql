-- dedup_move_rows moves the rows of the DEFAULT partition in [$1, $2) into
-- the day partition :"partition" before it is attached: Postgres refuses to
-- attach a range while DEFAULT holds rows of it.
WITH moved AS (
	DELETE FROM processed_event_default WHERE event_id >= $1 AND event_id < $2
	RETURNING event_id, consumer_group, processed_at, order_id)
INSERT INTO :"partition" (event_id, consumer_group, processed_at, order_id)
SELECT event_id, consumer_group, processed_at, order_id FROM moved;
