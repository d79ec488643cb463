-- reserve_prelude starts a reserve pipeline of several events. It has the
-- pipeline's statements planned once and by their indexes, for that
-- transaction only. Left to itself Postgres plans reserve_group afresh at
-- every execution (a custom plan for the array at hand looks cheaper than the
-- generic one), and planning it costs about what running it does; while the
-- generic plan built from the statistics of a new, never analyzed table scans
-- invoice whole, and keeps doing so as the table grows. These statements
-- touch a few rows each by primary and unique keys, so index lookups in
-- nested loops are their right plan at any size, on a new database as on a
-- large one (`make bench`'s grouped ceiling and its in-flight 64 cell show
-- what it is worth; the bench's tables are emptied for every run, as new as
-- they get). Set per transaction, it reaches no other statement of the
-- session, and passes PgBouncer (which refuses unknown startup parameters).
-- settle_prelude starts with the same settings
-- (infra/postgres/statements_test.go ties them).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true);
