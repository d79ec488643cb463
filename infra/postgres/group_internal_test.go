package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/internal/testkit/poll"
)

// A panic while a group is sent ends no process: every caller of the group
// is told to send its request alone, in its own goroutine, even the caller
// of a group of one.
func TestGroupPanicSendsEachAlone(t *testing.T) {
	t.Parallel()
	started, gate := make(chan struct{}), make(chan struct{})
	var sent atomic.Int32
	g := &grouper[int, int]{limit: 1, max: 8,
		key:     func(int) []string { return nil },
		acquire: func(context.Context) (*pgxpool.Conn, error) { return nil, nil },
		run: func(_ context.Context, _ batchSender, reqs []int) ([]int, error) {
			if sent.Add(1) == 1 {
				close(started)
				<-gate // the others queue behind this group of one
			}
			panic("boom")
		},
	}
	var wg sync.WaitGroup
	alone := make([]bool, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, alone[i], errs[i] = g.do(context.Background(), i) })
		if i == 0 {
			<-started
		}
	}
	poll.Until(t, "two requests queued", 10*time.Second, func() bool { return g.queued() == 2 })
	close(gate)
	wg.Wait()
	for i := range 3 {
		if !alone[i] || errs[i] != nil {
			t.Errorf("request %d: alone %v, error %v; want alone, no error", i, alone[i], errs[i])
		}
	}
	if n := sent.Load(); n != 2 {
		t.Errorf("%d groups sent, want 2 (one of 1, one of 2)", n)
	}
}

// Requests with a key in common never share a group, and keep their order
// of arrival: the group statements are set-based, and an order's events
// must reach the database in the order the consumer sent them.
func TestGroupKeysNeverShareAGroup(t *testing.T) {
	t.Parallel()
	started, gate := make(chan struct{}), make(chan struct{})
	var (
		mu     sync.Mutex
		groups [][]string
	)
	g := &grouper[string, string]{limit: 1, max: 8,
		key:     func(r string) []string { return []string{r[:1]} }, // "a1" and "a2" share key "a"
		acquire: func(context.Context) (*pgxpool.Conn, error) { return nil, nil },
		run: func(_ context.Context, _ batchSender, reqs []string) ([]string, error) {
			mu.Lock()
			groups = append(groups, reqs)
			first := len(groups) == 1
			mu.Unlock()
			if first {
				close(started)
				<-gate
			}
			return reqs, nil
		},
	}
	var wg sync.WaitGroup
	for i, r := range []string{"x0", "a1", "b1", "a2", "c1", "a3"} {
		wg.Go(func() {
			if got, alone, err := g.do(context.Background(), r); got != r || alone || err != nil {
				t.Errorf("do(%q) = %q, %v, %v", r, got, alone, err)
			}
		})
		if i == 0 {
			<-started
		}
		// One at a time, so that the queue holds them in this order.
		poll.Until(t, "request queued", 10*time.Second, func() bool { return g.queued() == i })
	}
	close(gate)
	wg.Wait()
	want := [][]string{{"x0"}, {"a1", "b1", "c1"}, {"a2"}, {"a3"}}
	if len(groups) != len(want) {
		t.Fatalf("groups %v, want %v", groups, want)
	}
	for i := range want {
		if len(groups[i]) != len(want[i]) {
			t.Fatalf("groups %v, want %v", groups, want)
		}
		for j := range want[i] {
			if groups[i][j] != want[i][j] {
				t.Fatalf("groups %v, want %v", groups, want)
			}
		}
	}
}
