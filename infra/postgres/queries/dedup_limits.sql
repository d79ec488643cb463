-- dedup_limits bounds every statement of a maintenance transaction by the
-- rest of the pass ($1, statement_timeout) and every wait for a table lock by
-- $2 (lock_timeout), as Postgres durations ('1500ms'): the server, not the
-- client, ends a statement that runs out of time, so the connection stays
-- usable and the pass can roll back, which releases the maintenance lock.
-- Inserts into processed_event queue behind a waiting DROP or ATTACH: the lock
-- timeout is also the longest maintenance may hold up billing.
SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true);
