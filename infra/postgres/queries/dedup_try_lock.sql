-- dedup_try_lock takes the maintenance lock $1 for the transaction, or
-- returns false at once when another process holds it. Transaction-scoped: a
-- session lock would stay on whichever server session a pooler in
-- transaction mode lent for the statement.
SELECT pg_try_advisory_xact_lock($1);
