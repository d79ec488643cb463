-- consume_state reads the consumption switch of `billing consume pause` and
-- `billing consume resume`: the latest of their decisions
-- (migrations/0007_decision.sql keeps every one, and the switch has no table
-- of its own, so the record and the state cannot disagree). The commands are
-- literals, not parameters, so that the partial index decision_consume_idx,
-- whose predicate names them, serves it under a generic plan too; they are
-- the ones consume_record writes (infra/postgres/statements_test.go ties
-- them).
SELECT id, decided_at, decided_by, command = 'consume pause', coalesce(note, '')
FROM decision WHERE command IN ('consume pause', 'consume resume')
ORDER BY id DESC LIMIT 1;
