-- dedup_create_partition creates the day partition :"partition" as a plain
-- table shaped like processed_event, attached later (dedup_attach_partition):
-- CREATE TABLE … PARTITION OF would lock the whole table.
CREATE TABLE :"partition" (LIKE processed_event INCLUDING DEFAULTS);
