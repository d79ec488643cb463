-- dedup_attach_partition attaches :"partition" as the range [:'lo', :'hi')
-- of event ids (bounds as literals: DDL takes no parameters; they are uuids
-- the maintainer made). It takes only SHARE UPDATE EXCLUSIVE on
-- processed_event, so inserts into the other partitions go on, and builds the
-- partition's indexes.
ALTER TABLE processed_event ATTACH PARTITION :"partition" FOR VALUES FROM (:'lo') TO (:'hi');
