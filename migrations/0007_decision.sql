-- 0007: the decisions of people (CONTRACT.md §1, §7): `billing invoice
-- resolve`, `billing reconcile --resolve-held`, `billing consume pause` and
-- `billing consume resume`, each kept with who made it, when, what it
-- applied to (order and key), the status before and after and the note.
--
-- Append-only: nothing the service does updates or deletes a row (the
-- trigger below refuses it for every writer, a person's psql included; a
-- superuser who must can disable it). The consumption switch has no table
-- of its own: its state is the latest `consume pause` or `consume resume`
-- row, so the record and the state can never disagree.
--
-- Rollout: new tables only; the previous release neither reads nor writes
-- them, and no lock is taken on a table it uses.

CREATE TABLE decision (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    decided_at      timestamptz NOT NULL DEFAULT now(),
    decided_by      text        NOT NULL CHECK (length(decided_by) BETWEEN 1 AND 64),
    command         text        NOT NULL
        CHECK (command IN ('invoice resolve', 'reconcile resolve-held', 'consume pause', 'consume resume')),
    -- the invoice the decision applied to, and the key the person looked at
    -- (NULL for the consumption switch)
    order_id        text        NULL,
    idempotency_key uuid        NULL,
    status_before   text        NULL,
    status_after    text        NULL,
    charge_id       text        NULL,
    -- the invoice's reason when the person decided (a hold's reason is kept
    -- here even if a later transition changes the invoice's)
    reason_before   text        NULL,
    note            text        NULL CHECK (length(note) <= 512),
    CHECK ((command IN ('consume pause', 'consume resume')) = (order_id IS NULL))
);

-- `billing invoice show` lists an order's decisions.
CREATE INDEX decision_order_id_idx ON decision (order_id, id) WHERE order_id IS NOT NULL;

-- Every pod reads the switch's latest row every few seconds.
CREATE INDEX decision_consume_idx ON decision (id) WHERE command IN ('consume pause', 'consume resume');

CREATE FUNCTION decision_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'decision rows are kept for good: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER decision_append_only BEFORE UPDATE OR DELETE ON decision
    FOR EACH ROW EXECUTE FUNCTION decision_append_only();
CREATE TRIGGER decision_no_truncate BEFORE TRUNCATE ON decision
    FOR EACH STATEMENT EXECUTE FUNCTION decision_append_only();
