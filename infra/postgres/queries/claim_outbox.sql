-- claim_outbox claims up to $1 events for one relay: the oldest waiting event
-- of each order only, so that an order's events are published in the order
-- of its transitions however many relays run (its next event is not the
-- oldest while an earlier one waits, even one another relay holds), and FOR
-- UPDATE SKIP LOCKED, so that relays in several pods never hold one row at
-- once: each row is published by one process at a time. The claim is the
-- relay's transaction; the rows are deleted in it (delete_published) once
-- Kafka has acknowledged them.
--
-- Only rows whose transaction $2, the snapshot of the pass's flush
-- (flush_wal), saw committed are claimed: those are on disk. A row committed
-- since waits for the next pass, and so does every later row of its order.
SELECT o.id, o.event_id, o.order_id, o.status, o.customer_id, o.amount, o.currency, o.idempotency_key,
	coalesce(o.charge_id, ''), coalesce(o.reason, ''), coalesce(o.traceparent, ''), o.occurred_at
FROM invoice_outbox o
WHERE NOT EXISTS (SELECT FROM invoice_outbox earlier WHERE earlier.order_id = o.order_id AND earlier.id < o.id)
	AND pg_visible_in_snapshot(o.xact, $2::pg_snapshot)
ORDER BY o.id
LIMIT $1
FOR UPDATE OF o SKIP LOCKED;
