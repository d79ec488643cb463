-- dedup_partition_exists reports whether the table $1 (a quoted name)
-- exists: another process may have dropped it since it was listed.
SELECT to_regclass($1) IS NOT NULL;
