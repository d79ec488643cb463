package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
)

// A panic while a group is sent ends no process: every caller of the group
// is told to send its request alone, in its own goroutine, even the caller
// of a group of one.
//
// The grouper's tests here run in synctest bubbles: synctest.Wait returns
// once every caller and runner is blocked, so the queue is checked exactly
// when it has settled, with no wall-clock wait.
func TestGroupPanicSendsEachAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testGroupPanicSendsEachAlone)
}

func testGroupPanicSendsEachAlone(t *testing.T) {
	started, gate := make(chan struct{}), make(chan struct{})
	var sent atomic.Int32
	g := &grouper[int, int]{limit: 1, max: 8,
		key:     func(ks []string, _ int) []string { return ks },
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
	// On a failed check too: a runner left at the gate would end the
	// bubble, and the test binary, in a deadlock panic.
	release := sync.OnceFunc(func() { close(gate) })
	defer func() { release(); wg.Wait() }()
	alone := make([]bool, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { _, alone[i], errs[i] = g.do(context.Background(), i) })
		if i == 0 {
			<-started
		}
	}
	synctest.Wait() // every caller waits for its answer, the runner at the gate
	if n := g.queued(); n != 2 {
		t.Fatalf("%d requests queued behind the group of one, want 2", n)
	}
	release()
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
	synctest.Test(t, testGroupKeysNeverShareAGroup)
}

func testGroupKeysNeverShareAGroup(t *testing.T) {
	started, gate := make(chan struct{}), make(chan struct{})
	var (
		mu     sync.Mutex
		groups [][]string
	)
	g := &grouper[string, string]{limit: 1, max: 8,
		key:     func(ks []string, r string) []string { return append(ks, r[:1]) }, // "a1" and "a2" share key "a"
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
	release := sync.OnceFunc(func() { close(gate) }) // as above
	defer func() { release(); wg.Wait() }()
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
		synctest.Wait()
		if n := g.queued(); n != i {
			t.Fatalf("after request %q: %d queued, want %d", r, n, i)
		}
	}
	release()
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

// close waits for the runner of a group whose caller has left (the runner
// outlives the call that started it), and a request after close fails as
// a Postgres outage without starting one.
func TestGroupCloseWaitsForRunners(t *testing.T) {
	t.Parallel()
	started, gate := make(chan struct{}), make(chan struct{})
	var (
		sent     atomic.Int32
		finished atomic.Bool
	)
	g := &grouper[int, int]{limit: 1, max: 8,
		key:     func(ks []string, _ int) []string { return ks },
		acquire: func(context.Context) (*pgxpool.Conn, error) { return nil, nil },
		run: func(_ context.Context, _ batchSender, reqs []int) ([]int, error) {
			sent.Add(1)
			close(started)
			<-gate
			finished.Store(true)
			return reqs, nil
		},
	}
	ctx, leave := context.WithCancel(t.Context())
	left := make(chan error, 1)
	go func() { _, _, err := g.do(ctx, 1); left <- err }()
	<-started
	leave()
	if err := <-left; err == nil {
		t.Fatal("do() after its caller left = nil error, want the caller's")
	}
	closed := make(chan struct{})
	go func() { g.close(); close(closed) }()
	close(gate)
	<-closed
	if !finished.Load() {
		t.Error("close returned while the runner still sent its group")
	}
	if _, _, err := g.do(t.Context(), 2); !errors.As(err, new(*order.OutageError)) || !errors.Is(err, errClosed) {
		t.Errorf("do() after close = %v, want a Postgres outage, errClosed", err)
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("%d groups sent, want 1: none after close", n)
	}
}

// A group's statement runs until every one of its callers has left: one
// caller's cancellation (a revoked partition) must not fail its neighbours,
// and a group nobody waits for any more stops.
func TestGroupEndsWhenEveryCallerHasLeft(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testGroupEndsWhenEveryCallerHasLeft)
}

func testGroupEndsWhenEveryCallerHasLeft(t *testing.T) {
	started, gate := make(chan struct{}), make(chan struct{})
	var (
		groups atomic.Int32
		runCtx atomic.Pointer[context.Context]
	)
	g := &grouper[int, int]{limit: 1, max: 8,
		key:     func(ks []string, _ int) []string { return ks },
		acquire: func(context.Context) (*pgxpool.Conn, error) { return nil, nil },
		run: func(ctx context.Context, _ batchSender, reqs []int) ([]int, error) {
			if groups.Add(1) == 1 {
				close(started)
				<-gate // the others queue behind this group of one
				return reqs, nil
			}
			runCtx.Store(&ctx)
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _, _, _ = g.do(context.Background(), 0) })
	<-started
	ctxs := make([]context.Context, 3)
	leaves := make([]context.CancelFunc, 3)
	for i := range ctxs {
		ctxs[i], leaves[i] = context.WithCancel(t.Context())
		defer leaves[i]()
		wg.Go(func() { _, _, _ = g.do(ctxs[i], i+1) })
	}
	synctest.Wait()
	close(gate) // the three run as one group
	synctest.Wait()
	p := runCtx.Load()
	if p == nil {
		t.Fatal("the group of three never ran")
	}
	for i := range 2 {
		leaves[i]()
		synctest.Wait()
		if err := (*p).Err(); err != nil {
			t.Fatalf("%d of 3 callers left: the group's context ended (%v), want it running for the others", i+1, err)
		}
	}
	leaves[2]()
	synctest.Wait()
	if (*p).Err() == nil {
		t.Error("every caller left: the group's context is still alive, want it ended")
	}
}
