package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// The consumption switch is its latest decision: none means consuming; a
// pause and a resume each say who, when and why, and each returns the
// switch before and after it. Two people deciding at once are taken one
// after the other: each sees the other's decision or the one before both,
// and the switch ends as the later one says.
func TestConsumeSwitch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	st, err := store.ConsumeState(ctx)
	if err != nil || st != (postgres.ConsumeState{}) {
		t.Fatalf("switch of a new database = %+v, %v; want never paused", st, err)
	}
	before, after, err := store.SetConsumption(ctx, true, "alice", "standby promoted; checking the gateway's charges")
	if err != nil || before.Paused || !after.Paused || after.DecidedBy != "alice" || after.ID == 0 || after.DecidedAt.IsZero() {
		t.Fatalf("pause = %+v -> %+v, %v", before, after, err)
	}
	if st, err := store.ConsumeState(ctx); err != nil || st != after {
		t.Errorf("switch after the pause = %+v, %v; want %+v", st, err, after)
	}
	_, resumed, err := store.SetConsumption(ctx, false, "bob", "")
	if err != nil || resumed.Paused || resumed.Note != "" || resumed.ID <= after.ID {
		t.Fatalf("resume = %+v, %v", resumed, err)
	}

	// Two decisions at once: both wait for the switch's lock (held here
	// meanwhile), then go one after the other.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op once rolled back below
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", postgres.SwitchLockKey); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([][2]postgres.ConsumeState, 2)
	for i, paused := range []bool{true, false} {
		wg.Go(func() {
			b, a, err := store.SetConsumption(ctx, paused, "carol", "")
			if err != nil {
				t.Error(err)
			}
			results[i] = [2]postgres.ConsumeState{b, a}
		})
		poll.Until(t, fmt.Sprintf("%d decisions waiting for the switch's lock", i+1), 10*time.Second, func() bool {
			var waiting int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting)
			return err == nil && waiting == i+1
		})
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	first, second := results[0], results[1]
	if first[1].ID > second[1].ID {
		first, second = second, first
	}
	if first[0] != resumed || second[0] != first[1] {
		t.Errorf("concurrent decisions: %+v then %+v; each must see the one before it", first, second)
	}
	if st, err := store.ConsumeState(ctx); err != nil || st != second[1] {
		t.Errorf("switch = %+v, %v; want the later decision %+v", st, err, second[1])
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM decision WHERE command IN ('consume pause', 'consume resume')`).Scan(&n); err != nil || n != 4 {
		t.Errorf("decisions kept = %d, %v; want every one (4)", n, err)
	}
}
