-- claim_pending takes up to $2 due pending invoices, those whose key started
-- more than $1 seconds ago, oldest key first, and moves each one's next
-- attempt past its back-off ($3 seconds doubled per claim, at most $4) in the
-- same statement. FOR UPDATE SKIP LOCKED lets completers of several pods
-- claim at once without waiting for each other: a row another claim holds is
-- skipped, and one it has just committed is re-checked on its new
-- next_resume_at, which is in the future. updated_at is left alone: it is
-- when the key started, the clock of BILLING_PENDING_RESUME_AFTER and of the
-- gauges. An invoice whose attempt is alive is not due: its take would be
-- refused, and a claim would only push its next try a doubled back-off past
-- the attempt's end (an attempt that migration 0006 records for a release
-- without the fence lives the longest any configuration allows).
--
-- An UPDATE returns its rows in no particular order, so the claimed rows are
-- sorted again on the way out: the pass resumes the oldest first.
WITH claimed AS (
	UPDATE invoice SET resume_attempts = resume_attempts + 1,
		next_resume_at = now() + make_interval(secs => least($3 * power(2, least(resume_attempts, 30)), $4)), written_xact = pg_current_xact_id()
	WHERE order_id IN (
		SELECT order_id FROM invoice
		WHERE status = 'pending' AND updated_at < now() - make_interval(secs => $1)
			AND (next_resume_at IS NULL OR next_resume_at <= now())
			AND (attempt_until IS NULL OR attempt_until <= now())
		ORDER BY updated_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED)
	RETURNING *)
SELECT order_id, event_id, customer_id, amount, currency, status, coalesce(charge_id, ''), coalesce(reason, ''), created_at, key_sent_at, reopens FROM claimed ORDER BY updated_at, order_id;
