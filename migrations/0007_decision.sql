-- 0007: what a person needs to decide on an invoice, and the record of
-- what was decided (docs/interface.md §1, §7): `billing invoice show` prints an
-- invoice with the gateway's answers to its attempts and every decision
-- made on it.
--
-- The decisions of people: `billing invoice resolve`, `billing reconcile
-- --resolve-held`, `billing consume pause` and `billing consume resume`,
-- each kept with who made it, when, what it applied to (order and key), the
-- status before and after and the note.
--
-- Append-only: nothing the service does updates or deletes a row (the
-- trigger below refuses it for every writer, a person's psql included; a
-- superuser who must can disable it). The consumption switch has no table
-- of its own: its state is the latest `consume pause` or `consume resume`
-- row, so the record and the state can never disagree.
--
-- Rollout: a new table, a nullable column without a default on invoice
-- (no rewrite: a change of the catalog only) and a function; the previous
-- release neither reads nor writes them, and its INSERTs name their
-- columns, so they leave the new one NULL.

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

-- The gateway's answers to the invoice's attempts, newest last, at most 16
-- (invoice_answers_push): each "<time> <key> <answer>", the answer being the
-- HTTP status and the gateway's error code when it is a short token (never
-- its free text, docs/interface.md §6), "unsent" for a request that never left,
-- or "no answer recorded" for an attempt that ended with neither a settle
-- nor a release (a timeout, a reset, a 502/504 or a 409 in progress: the
-- request may have run at the gateway). Written by the statements billing
-- runs anyway (the settle, the release, the next take of the attempt), so
-- it costs no round trip (infra/postgres, repo.go).
ALTER TABLE invoice ADD COLUMN answers text[] NULL;

-- invoice_answers_push returns answers with one more entry for answer, sent
-- under key and answered (or ended) at "at", keeping the newest 16; an
-- empty answer changes nothing. Plain SQL, so the planner inlines it into
-- the statements that call it.
CREATE FUNCTION invoice_answers_push(answers text[], at timestamptz, key uuid, answer text) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN coalesce(answer, '') = '' THEN answers
        ELSE (coalesce(answers, '{}') || (to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' ' || key::text || ' ' || left(answer, 80)))
            [greatest(coalesce(cardinality(answers), 0) - 14, 1):]
    END
$$;
