-- consume_record records a decision on the consumption switch: who ($1), the
-- command ($2, 'consume pause' or 'consume resume', which consume_state
-- reads), the note ($3, '' for none); it returns its id and time.
INSERT INTO decision (decided_by, command, note) VALUES ($1, $2, NULLIF($3, ''))
RETURNING id, decided_at;
