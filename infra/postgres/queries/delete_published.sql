-- delete_published deletes the outbox rows $1 that the relay claimed
-- (claim_outbox) once Kafka has acknowledged them, in the claim's
-- transaction: the table holds only what waits.
DELETE FROM invoice_outbox WHERE id = ANY ($1::bigint[]);
