package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
)

// batchSender sends a batch: the pool (a connection of its own) or one
// connection of it.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// grouper sends the work of concurrent callers to Postgres in groups: a
// caller queues its request and waits; while fewer than limit groups are
// being sent, a runner takes every queued request it may (at most max, and
// no two with the same key, see below) and runs them as one group, then
// takes the next until the queue is empty. There is no timer: a request
// that finds a runner free goes at once, alone, and requests only pile up
// into larger groups while every runner waits on Postgres, which is when
// one statement and one commit for many events pays.
//
// Requests that joins refuses to put beside a group's oldest request
// (reserves of another consumer group, which the group statement takes as
// one value) never share its group either.
//
// Two requests with the same key (an order, an event id) never share a
// group: the group statements are set-based, and rows of one statement do
// not see each other's writes the way statements run one after another do.
// The later one waits for a later group, so per key the order of arrival
// is the order of execution.
//
// A group that fails as a whole (a constraint, a deadlock, one row's bad
// value) fails no request: each of its requests is sent again alone
// (result.alone), so one event's failure stays its own.
type grouper[Req, Res any] struct {
	limit int // groups in flight at once
	max   int // requests in one group
	// key appends r's keys to ks and returns it; take calls it under mu,
	// with a buffer it keeps (a slice per request showed in make bench's
	// allocation profiles).
	key func(ks []string, r Req) []string
	// joins, when set, reports whether r may share a group whose first
	// request is first (the parameters the statement takes once).
	joins func(first, r Req) bool
	// acquire gets the connection a group is sent on, before the group is
	// taken from the queue: requests arriving while every connection is
	// busy wait in the queue, where the next free one takes them all,
	// rather than one each inside the pool.
	acquire func(ctx context.Context) (*pgxpool.Conn, error)
	run     func(ctx context.Context, q batchSender, reqs []Req) ([]Res, error)
	// observe, when set, is told the size of each group sent.
	observe func(n int)

	mu      sync.Mutex
	keys    []string // take's buffer for a request's keys
	queue   []*waiter[Req, Res]
	running int
	// closed: close was called; no runner starts any more.
	closed bool
	// runners are the goroutines running groups: each outlives the call
	// that started it (it sends the groups of whoever queued meanwhile),
	// so the grouper owns them, and close waits for them.
	runners sync.WaitGroup
}

// errClosed: a request made after the store was closed, an outage of
// Postgres for its caller.
var errClosed = errors.New("store closed")

type waiter[Req, Res any] struct {
	ctx  context.Context
	req  Req
	done chan result[Res] // buffered: the runner never blocks on a caller that left
}

type result[Res any] struct {
	res Res
	err error
	// alone: the group failed as a whole; the caller sends its request on
	// its own, so that only a request that fails alone fails.
	alone bool
}

// do queues req and waits for its group's answer, or ctx's end. A request
// already sent when ctx ends may still be committed: like a transaction
// cancelled during its COMMIT, the caller cannot know, and billing's
// reserve and settle are safe to run again.
func (g *grouper[Req, Res]) do(ctx context.Context, req Req) (Res, bool, error) {
	w := &waiter[Req, Res]{ctx: ctx, req: req, done: make(chan result[Res], 1)}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		var zero Res
		return zero, false, &order.OutageError{Dependency: dependency, Err: errClosed}
	}
	g.queue = append(g.queue, w)
	start := g.running < g.limit
	if start {
		g.running++
		g.runners.Add(1) // under mu: close's Wait sees every runner started before it
	}
	g.mu.Unlock()
	if start {
		go func() {
			defer g.runners.Done()
			g.loop()
		}()
	}
	select {
	case r := <-w.done:
		return r.res, r.alone, r.err
	case <-ctx.Done():
		var zero Res
		return zero, false, ctx.Err()
	}
}

// close makes every later request fail with errClosed and waits for the
// runners, which end once the queue is empty: its callers get their
// answers, or have left.
func (g *grouper[Req, Res]) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.runners.Wait()
}

// loop runs groups until the queue is empty: it gets a connection for the
// oldest waiting caller (and gives up on it if that caller leaves), then
// takes a group and sends it on that connection.
func (g *grouper[Req, Res]) loop() {
	for {
		head := g.head()
		if head == nil {
			return
		}
		conn, err := g.acquire(head)
		if err != nil && head.Err() != nil {
			continue // that caller left; the next one's wait starts over
		}
		batch := g.take()
		if batch == nil {
			if conn != nil {
				conn.Release()
			}
			return
		}
		if err != nil {
			// No connection (Postgres unreachable): the group gets the
			// pool's error, which translate classifies.
			g.deliver(batch, nil, err)
			continue
		}
		g.send(conn, batch)
		if conn != nil {
			conn.Release()
		}
	}
}

// head returns the context of the oldest caller still waiting, or nil (and
// gives the runner's slot back) when none is.
func (g *grouper[Req, Res]) head() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.queue) > 0 && g.queue[0].ctx.Err() != nil {
		g.queue[0] = nil
		g.queue = g.queue[1:]
	}
	if len(g.queue) == 0 {
		g.running--
		return nil
	}
	return g.queue[0].ctx
}

// take removes the next group from the queue: the oldest requests whose
// keys are all new to the group, up to max, skipping callers that left. It
// returns nil, and gives its slot back, when the queue is empty.
func (g *grouper[Req, Res]) take() []*waiter[Req, Res] {
	g.mu.Lock()
	defer g.mu.Unlock()
	var (
		batch []*waiter[Req, Res]
		keys  map[string]struct{}
		rest  = g.queue[:0]
	)
	for _, w := range g.queue {
		if w.ctx.Err() != nil {
			continue // its caller has returned ctx's error already
		}
		if len(batch) == g.max || (len(batch) > 0 && g.joins != nil && !g.joins(batch[0].req, w.req)) {
			rest = append(rest, w)
			continue
		}
		g.keys = g.key(g.keys[:0], w.req)
		ks := g.keys
		if clashes(keys, ks) {
			rest = append(rest, w)
			continue
		}
		if keys == nil {
			keys = make(map[string]struct{})
		}
		for _, k := range ks {
			keys[k] = struct{}{}
		}
		batch = append(batch, w)
	}
	clear(g.queue[len(rest):]) // drop the references the slice no longer covers
	g.queue = rest
	if len(batch) == 0 {
		g.running--
	}
	return batch
}

func clashes(keys map[string]struct{}, ks []string) bool {
	for _, k := range ks {
		if _, ok := keys[k]; ok {
			return true
		}
	}
	return false
}

// send runs one group under a context that ends only when every one of its
// callers has left: one caller's cancellation (a revoked partition) must not
// fail its neighbours, and a group nobody waits for any more should stop.
func (g *grouper[Req, Res]) send(conn *pgxpool.Conn, batch []*waiter[Req, Res]) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(batch)))
	reqs := make([]Req, len(batch))
	ctxs := make([]context.Context, len(batch))
	stops := make([]func() bool, len(batch))
	// One function for every caller, and the stops called by one defer: a
	// closure and a defer record per caller showed in make bench's
	// allocation profiles.
	left := func() {
		if waiting.Add(-1) == 0 {
			cancel()
		}
	}
	for i, w := range batch {
		reqs[i], ctxs[i] = w.req, w.ctx
		stops[i] = context.AfterFunc(w.ctx, left)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	if g.observe != nil {
		g.observe(len(batch))
	}
	res, err := g.runSafely(withGroup(ctx, ctxs), conn, reqs)
	g.deliver(batch, res, err)
}

// errGroupPanicked marks the error of a group whose run panicked.
var errGroupPanicked = errors.New("postgres: panic while sending a group")

// runSafely is run with a panic turned into the group's error: the runner
// is a goroutine of its own, where a panic would end the process, while in
// the caller's goroutine the consumer's recovery (billing_handler_panics_total)
// contains it to one event. Every request of the group is then sent alone
// by its caller, even a group of one: the request that causes it panics
// again there, in its caller.
func (g *grouper[Req, Res]) runSafely(ctx context.Context, conn *pgxpool.Conn, reqs []Req) (res []Res, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: a group of %d: %v", errGroupPanicked, len(reqs), p)
		}
	}()
	return g.run(ctx, conn, reqs)
}

// deliver answers the callers of batch: each its result, or err when the
// group was a single request, or "alone" for a failed group of several.
func (g *grouper[Req, Res]) deliver(batch []*waiter[Req, Res], res []Res, err error) {
	for i, w := range batch {
		switch {
		case err == nil:
			w.done <- result[Res]{res: res[i]}
		case len(batch) == 1 && !errors.Is(err, errGroupPanicked):
			w.done <- result[Res]{err: err}
		default:
			w.done <- result[Res]{alone: true}
		}
	}
}
