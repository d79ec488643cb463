package postgres

import (
	"context"
	"sync"
	"sync/atomic"
)

// grouper sends the work of concurrent callers to Postgres in groups: a
// caller queues its request and waits; while fewer than limit groups are
// being sent, a runner takes every queued request it may (at most max, and
// no two with the same key, see below) and runs them as one group, then
// takes the next until the queue is empty. There is no timer: a request
// that finds a runner free goes at once, alone, and requests only pile up
// into larger groups while every runner waits on Postgres, which is when
// one statement and one commit for many events pays.
//
// Requests of different classes (reserves of different consumer groups,
// which the group statement takes as one value) never share a group either:
// a group is of the class of its oldest request.
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
	key   func(Req) []string
	// class, when set, splits requests that may not share a statement at
	// all; nil: every request is of one class.
	class func(Req) string
	run   func(ctx context.Context, reqs []Req) ([]Res, error)
	// observe, when set, is told the size of each group sent.
	observe func(n int)

	mu      sync.Mutex
	queue   []*waiter[Req, Res]
	running int
}

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
	g.queue = append(g.queue, w)
	start := g.running < g.limit
	if start {
		g.running++
	}
	g.mu.Unlock()
	if start {
		go g.loop()
	}
	select {
	case r := <-w.done:
		return r.res, r.alone, r.err
	case <-ctx.Done():
		var zero Res
		return zero, false, ctx.Err()
	}
}

// loop runs groups until the queue is empty.
func (g *grouper[Req, Res]) loop() {
	for {
		batch := g.take()
		if batch == nil {
			return
		}
		g.send(batch)
	}
}

// take removes the next group from the queue: the oldest requests of the
// oldest one's class whose keys are all new to the group, up to max,
// skipping callers that left. It
// returns nil, and gives its slot back, when the queue is empty.
func (g *grouper[Req, Res]) take() []*waiter[Req, Res] {
	g.mu.Lock()
	defer g.mu.Unlock()
	var (
		batch []*waiter[Req, Res]
		keys  map[string]struct{}
		class string
		rest  = g.queue[:0]
	)
	for _, w := range g.queue {
		if w.ctx.Err() != nil {
			continue // its caller has returned ctx's error already
		}
		if len(batch) == 0 && g.class != nil {
			class = g.class(w.req)
		}
		if len(batch) == g.max || (g.class != nil && g.class(w.req) != class) || clashes(keys, g.key(w.req)) {
			rest = append(rest, w)
			continue
		}
		if keys == nil {
			keys = make(map[string]struct{})
		}
		for _, k := range g.key(w.req) {
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
func (g *grouper[Req, Res]) send(batch []*waiter[Req, Res]) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	var waiting atomic.Int32
	waiting.Store(int32(len(batch)))
	reqs := make([]Req, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
		stop := context.AfterFunc(w.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	if g.observe != nil {
		g.observe(len(batch))
	}
	res, err := g.run(ctx, reqs)
	for i, w := range batch {
		switch {
		case err == nil:
			w.done <- result[Res]{res: res[i]}
		case len(batch) == 1:
			w.done <- result[Res]{err: err}
		default:
			w.done <- result[Res]{alone: true}
		}
	}
}
