-- dedup_lock_partition locks the day partition :"partition" before it is
-- counted and dropped, so that the count is exact and no row can arrive
-- between the check and the drop.
LOCK TABLE :"partition" IN ACCESS EXCLUSIVE MODE;
