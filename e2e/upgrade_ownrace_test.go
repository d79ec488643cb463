package e2e

import (
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// TestOwnRaceOnlyExcusesMovesBeforeTheTriggers: the upgrade test lets pass
// a double charge only when both moves that made it, the rejection under
// the first key and the reopen under the second, came before migration
// 0006; the same story a moment later is a failure. The story is CI's
// (ord-000965): the rejection, then the first key charged by 1.0.0's other
// path, then the reopen.
func TestOwnRaceOnlyExcusesMovesBeforeTheTriggers(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 6, 6, 43, 15, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	k1, k2 := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	trs := []transition{
		{at: at(914), orderID: "ord-1", status: order.StatusPending, key: k1},
		{at: at(3174), orderID: "ord-1", oldStatus: order.StatusPending, oldKey: k1, status: order.StatusRejected, key: k1},
		{at: at(4243), orderID: "ord-1", oldStatus: order.StatusRejected, oldKey: k1, status: order.StatusPending, key: k2},
		{at: at(4603), orderID: "ord-1", oldStatus: order.StatusPending, oldKey: k2, status: order.StatusCharged, key: k2},
		{at: at(4000), orderID: "ord-2", oldStatus: order.StatusPending, oldKey: k1, status: order.StatusRejected, key: k1},
	}
	for _, c := range []struct {
		name    string
		order   string
		final   uuid.UUID
		guarded time.Time
		want    bool
	}{
		{"both moves before 0006", "ord-1", k2, at(5000), true},
		{"the reopen after 0006", "ord-1", k2, at(4000), false},
		{"the reopen as 0006 was applied", "ord-1", k2, at(4243), false},
		{"both moves after 0006", "ord-1", k2, at(3000), false},
		{"0006 not applied", "ord-1", k2, time.Time{}, false},
		{"charged under the first key: no reopen made it", "ord-1", k1, at(5000), false},
		{"a rejection with no reopen", "ord-2", k1, at(5000), false},
		{"another order's moves", "ord-3", k2, at(5000), false},
	} {
		if got := ownRace(trs, c.order, c.final, c.guarded); got != c.want {
			t.Errorf("%s: ownRace = %v, want %v", c.name, got, c.want)
		}
	}
}
