-- dedup_lock_default locks the DEFAULT partition before a day partition is
-- made beside it (ACCESS EXCLUSIVE, which ATTACH takes anyway): no row can
-- reach it between the move of its rows of that day and the attach.
LOCK TABLE processed_event_default IN ACCESS EXCLUSIVE MODE;
