-- release_attempt ends attempt $3 of order $1's invoice, pending under key
-- $2, early: its request is over, as answer $4 says (the invoice's history of
-- the gateway's answers, migrations/0007). Another path's attempt is never
-- touched.
UPDATE invoice SET attempt_until = NULL, written_xact = pg_current_xact_id(), answers = invoice_answers_push(answers, now(), event_id, $4)
	WHERE order_id = $1 AND event_id = $2 AND attempt_id = $3 AND status = 'pending';
