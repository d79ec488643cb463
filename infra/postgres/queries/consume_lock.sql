-- consume_lock serialises the consumption switch's decisions on the advisory
-- lock $1 until the transaction ends, so that their ids follow their commits:
-- the latest id is the latest decision, also for two people deciding at once.
SELECT pg_advisory_xact_lock($1);
