package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConsumeState is the consumption switch of `billing consume pause` and
// `billing consume resume`: the latest of their decisions
// (migrations/0007_decision.sql keeps every one, and the switch has no
// table of its own, so the record and the state cannot disagree).
type ConsumeState struct {
	// Paused: the latest decision is a pause. The zero value (no decision
	// ever made) is not paused.
	Paused    bool
	DecidedBy string
	DecidedAt time.Time // by Postgres's clock
	Note      string
	ID        int64 // the decision's id; 0 when none was ever made
}

// The switch's two decisions, as the decision table names them (and
// queries/consume_state.sql, which reads them by the partial index whose
// predicate names them).
const (
	commandConsumePause  = "consume pause"
	commandConsumeResume = "consume resume"
)

// switchLockKey serialises the switch's decisions ("billswch" in ASCII;
// distinct from migrateLockKey and dedupLockKey), so that their ids follow
// their commits: the latest id is the latest decision, also for two people
// deciding at once.
const switchLockKey int64 = 0x62696c6c_73776368

// ConsumeState reads the consumption switch. Every pod reads it every few
// seconds (internal/app), and before it joins its groups.
func (s *Store) ConsumeState(ctx context.Context) (ConsumeState, error) {
	st, err := consumeState(ctx, s.pool)
	if err != nil {
		return ConsumeState{}, translate(ctx, fmt.Errorf("read the consumption switch: %w", err))
	}
	return st, nil
}

// SetConsumption records a person's decision on the switch, pause (paused)
// or resume, by who, with note ("" for none), and returns the switch
// before and after it. A decision equal to the state in force is recorded
// too: each is a person's act, kept with who made it.
func (s *Store) SetConsumption(ctx context.Context, paused bool, by, note string) (before, after ConsumeState, err error) {
	command := commandConsumeResume
	if paused {
		command = commandConsumePause
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stmts.consumeLock, switchLockKey); err != nil {
			return err
		}
		if before, err = consumeState(ctx, tx); err != nil {
			return err
		}
		after = ConsumeState{Paused: paused, DecidedBy: by, Note: note}
		return tx.QueryRow(ctx, stmts.consumeRecord, by, command, note).Scan(&after.ID, &after.DecidedAt)
	})
	if err != nil {
		return ConsumeState{}, ConsumeState{}, translate(ctx, fmt.Errorf("record %s by %s: %w", command, by, err))
	}
	return before, after, nil
}

// rowQuerier is what consumeState reads through: the pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func consumeState(ctx context.Context, q rowQuerier) (ConsumeState, error) {
	var st ConsumeState
	err := q.QueryRow(ctx, stmts.consumeState).Scan(&st.ID, &st.DecidedAt, &st.DecidedBy, &st.Paused, &st.Note)
	if errors.Is(err, pgx.ErrNoRows) {
		return ConsumeState{}, nil
	}
	return st, err
}
