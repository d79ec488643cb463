-- settle_prelude starts every settle pipeline: reserve_prelude's plan
-- settings, and a commit that does not wait for its WAL flush
-- (docs/design.md, "Grouped statements, and the settle that does not wait for
-- its flush": why that is safe for a settle, and only for a settle).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), set_config('synchronous_commit', 'off', true);
