-- decisions_of reads every decision made on order $1, oldest first.
SELECT id, decided_at, decided_by, command, coalesce(order_id, ''), idempotency_key,
		coalesce(status_before, ''), coalesce(status_after, ''), coalesce(charge_id, ''), coalesce(reason_before, ''), coalesce(note, '')
	FROM decision WHERE order_id = $1 ORDER BY id;
