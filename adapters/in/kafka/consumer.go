package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
)

// MessageHandler handles one record and returns its outcome.
type MessageHandler interface {
	Handle(ctx context.Context, msg Record) (order.Outcome, error)
}

// Options configures a Consumer.
type Options struct {
	// Tier is 0 for the main topic, N for retry tier N: a tier waits for each
	// record's x-not-before, at most the tier's delay (RetryPolicy.TierDelay)
	// counted from when it was fetched, so a forged or unreadable value
	// cannot hold a slot and its partition's commits; its failures go where
	// the policy says for tier N.
	Tier int
	// MaxInFlight bounds the events handled at once (1: sequential).
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes of the records held between fetch
	// and final outcome (default 8 MiB); a record larger than it goes
	// through alone.
	MaxInFlightBytes int64
	// CommitInterval coalesces commits (default 200ms).
	CommitInterval time.Duration
	// DrainTimeout bounds the wait for in-flight events after Run's ctx ends.
	DrainTimeout time.Duration
	// RevokeTimeout bounds the wait, when a rebalance takes partitions away,
	// for their in-flight events before the final commit of their
	// generation (default 5s). The group's rebalance waits for it, so it
	// must stay well under the rebalance timeout.
	RevokeTimeout time.Duration
	// Hold, when set, stops consumption while any of its reasons holds (an
	// operator's pause, a release the process is not safe beside): the
	// consumer stops fetching, gives its in-flight events the revoke grace,
	// commits, leaves the group, and joins again once the hold is open. It
	// verifies the hold (Hold.Verify) before it joins and before it fetches
	// from the partitions a generation gave it.
	Hold *Hold
}

// Consumer consumes one topic. See the package documentation.
type Consumer struct {
	src     Source
	handler MessageHandler
	router  *Router
	pause   *health.Pause
	m       *metrics.Consumer
	events  map[order.Outcome]prometheus.Counter // m.Events by outcome, read-only after NewConsumer
	log     *slog.Logger
	opts    Options
	policy  order.RetryPolicy // the router's: one policy for deciding and routing
	now     func() time.Time

	inFlight atomic.Int64 // events fetched and not yet done with, for logs
	budget   *byteBudget
}

// delivery is one fetched record on its way through the dispatcher, with
// the state of the partition (in the generation that fetched it) that its
// outcome is reported to.
type delivery struct {
	msg     Record
	fetched time.Time
	// stop ends the event's waits that are not work: it is the fetching
	// context of its generation, which ends at shutdown or when the
	// partition is revoked. It travels with the event, as a request's
	// context does, because the event outlives the fetch.
	stop context.Context
	part *partState
	gen  *sync.WaitGroup // the generation's events in flight
	// held is the event's part in the outages it meets; a record let
	// through as an outage's probe event starts held for it (health.Pause).
	held health.Holding
}

func deliveryKey(d delivery) string { return orderingKey(d.msg) }

// NewConsumer returns a consumer of src handling records with h and routing
// failures through r, retrying as r's policy (Routes.Policy) says.
func NewConsumer(src Source, h MessageHandler, r *Router, pause *health.Pause, m *metrics.Consumer, log *slog.Logger, o Options) *Consumer {
	if o.MaxInFlight < 1 {
		o.MaxInFlight = 1
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = 200 * time.Millisecond
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 25 * time.Second
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = 8 << 20
	}
	if o.RevokeTimeout <= 0 {
		o.RevokeTimeout = 5 * time.Second
	}
	// Every event counts its outcome: the counters are resolved here rather
	// than by label on each event (make bench's profiles).
	events := make(map[order.Outcome]prometheus.Counter)
	for _, out := range order.Outcomes() {
		events[out] = m.Events.WithLabelValues(string(out))
	}
	return &Consumer{src: src, handler: h, router: r, pause: pause, m: m, log: log.With(slog.Int("tier", o.Tier)),
		opts: o, policy: r.routes.Policy, now: time.Now, budget: newByteBudget(o.MaxInFlightBytes), events: events}
}

// Run consumes until ctx ends, then stops fetching, lets in-flight events
// finish within DrainTimeout, commits what finished and returns nil. Events
// not final by then stay uncommitted and come back to whoever owns their
// partition next. It returns an error only when the group fails for good.
//
// Run takes one generation of the group at a time: it reads the partitions
// that generation assigned, from their committed offsets, and commits only
// those, only through that generation. When the generation ends (a
// rebalance), fetching stops, in-flight events get RevokeTimeout to finish
// and their final watermark is committed while the generation still holds
// the partitions (as the Java client's onPartitionsRevoked does); whatever
// finishes later is never committed for them.
func (c *Consumer) Run(ctx context.Context) error {
	// Work outlives ctx by up to DrainTimeout: shutdown is not a failure of
	// the events in flight.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	d := newDispatcher(c.opts.MaxInFlight, deliveryKey, func(dl delivery) { c.process(workCtx, dl) })
	defer d.close()

	failures := 0
	var runErr error
	for ctx.Err() == nil {
		if !c.awaitHold(ctx) {
			break
		}
		gen, err := c.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, errHeld) {
				continue // held while joining: awaitHold leaves
			}
			if errors.Is(err, ErrSourceClosed) {
				runErr = fmt.Errorf("consumer group: %w", err)
				break
			}
			c.log.Error("join group failed, retrying", slog.String("error", err.Error()))
			if sleep(ctx, fetchDelay(failures)) != nil {
				break
			}
			failures++
			continue
		}
		failures = 0
		// Start binds the work to the generation: the group does not join
		// the next one before it returns, so the generation can still
		// commit after its ctx ended.
		done := make(chan struct{})
		gen.Start(func(genCtx context.Context) {
			defer close(done)
			if c.opts.Hold != nil {
				// A member of a release this one is not safe beside may
				// have joined with this generation (and, as its leader,
				// given this member partitions): look before fetching.
				if !c.opts.Hold.Verify(genCtx) {
					return
				}
				var release context.CancelFunc
				genCtx, release = c.opts.Hold.whileOpen(genCtx)
				defer release()
			}
			c.runGeneration(ctx, genCtx, gen, d, cancelWork)
		})
		<-done
	}
	// Events of generations that ended earlier may still run; they commit
	// nothing, but shutdown waits for them as for any other.
	c.drain(d, cancelWork)
	return runErr
}

// awaitHold returns at once without a Hold; with one, it verifies it and,
// while consumption is held, leaves the group and waits until the hold is
// open again. false when ctx ended first.
func (c *Consumer) awaitHold(ctx context.Context) bool {
	h := c.opts.Hold
	if h == nil {
		return true
	}
	left := false
	for {
		if h.Verify(ctx) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !left {
			left = true
			_, why := h.Held()
			if err := c.src.Leave(); err != nil {
				c.log.Warn("leave the group", slog.String("error", err.Error()))
			}
			c.log.Info("consumption held: not in the group, nothing fetched", slog.String("why", why))
		}
		if !h.WaitOpen(ctx) {
			return false
		}
	}
}

// next waits for the next generation; with a Hold, a hold that begins
// meanwhile ends the wait with errHeld.
func (c *Consumer) next(ctx context.Context) (Generation, error) {
	if c.opts.Hold == nil {
		return c.src.Next(ctx)
	}
	nctx, release := c.opts.Hold.whileOpen(ctx)
	defer release()
	gen, err := c.src.Next(nctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(nctx), errHeld) {
		return nil, errHeld
	}
	return gen, err
}

// drain waits up to DrainTimeout for every dispatched event, then cancels
// the work of those still running.
func (c *Consumer) drain(d *dispatcher[delivery], cancelWork context.CancelFunc) {
	t := time.NewTimer(c.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-d.idle():
	case <-t.C:
		c.log.Warn("drain budget spent; events still in flight stay uncommitted",
			slog.Int64("in_flight", c.inFlight.Load()))
		cancelWork()
	}
}

// runGeneration reads the partitions gen assigned until gen ends or stop
// does, commits every CommitInterval through gen, and on the way out waits
// for the generation's events (RevokeTimeout on a rebalance, DrainTimeout on
// shutdown), makes the final commit through gen and revokes the partitions.
func (c *Consumer) runGeneration(stop, genCtx context.Context, gen Generation, d *dispatcher[delivery], cancelWork context.CancelFunc) {
	fetchCtx, cancelFetch := context.WithCancel(genCtx)
	defer cancelFetch()
	defer context.AfterFunc(stop, cancelFetch)()

	var parts []*partState
	var inGen sync.WaitGroup
	var fetchers sync.WaitGroup
	// Which partitions this pod owns, at every assignment: the answer to
	// "which pod owns partition N" (BillingPartitionStuck's runbook), with
	// billing_partition_assigned. Logged before the gauge is set, so whoever
	// sees the gauge finds the line.
	assignments := gen.Assignments()
	owned := map[string][]int{}
	for _, a := range assignments {
		owned[a.Topic] = append(owned[a.Topic], a.Partition)
	}
	for _, ps := range owned {
		slices.Sort(ps)
	}
	c.log.Info("partitions assigned", slog.Int("generation", int(gen.ID())), slog.Int("partitions", len(assignments)),
		slog.Any("assigned", owned))
	for _, a := range assignments {
		c.m.Assigned.WithLabelValues(a.Topic, strconv.Itoa(a.Partition)).Set(1)
		defer c.m.Assigned.DeleteLabelValues(a.Topic, strconv.Itoa(a.Partition))
		ps := newPartState(a.Topic, a.Partition, a.Offset)
		ps.inFlightG = c.m.InFlight.WithLabelValues(a.Topic) // resolved once, not per event
		parts = append(parts, ps)
		r := c.src.OpenPartition(a.Topic, a.Partition, a.Offset)
		fetchers.Add(1)
		go func() {
			defer fetchers.Done()
			c.fetchLoop(fetchCtx, r, ps, &inGen, d)
			if err := r.Close(); err != nil {
				c.log.Warn("close partition reader", slog.String("topic", a.Topic), slog.Int("partition", a.Partition),
					slog.String("error", err.Error()))
			}
		}()
	}

	t := time.NewTicker(c.opts.CommitInterval)
	for fetchCtx.Err() == nil {
		select {
		case <-t.C:
			c.commit(gen, parts)
		case <-fetchCtx.Done():
		}
	}
	t.Stop()
	fetchers.Wait()

	if stop.Err() != nil {
		c.drain(d, cancelWork)
	} else {
		msg := "generation ended; its partitions' events get the revoke grace before the final commit"
		if errors.Is(context.Cause(genCtx), errHeld) {
			msg = "consumption held: fetching stopped; in-flight events get the revoke grace before the final commit and the group is left"
		}
		c.log.Info(msg, slog.Int("generation", int(gen.ID())), slog.Duration("grace", c.opts.RevokeTimeout))
		idle := make(chan struct{})
		go func() { inGen.Wait(); close(idle) }()
		rt := time.NewTimer(c.opts.RevokeTimeout)
		select {
		case <-idle:
		case <-rt.C:
			c.log.Warn("partitions revoked with events in flight; they stay uncommitted here",
				slog.Int("generation", int(gen.ID())), slog.Int64("in_flight", c.inFlight.Load()))
		}
		rt.Stop()
	}
	c.commit(gen, parts)
	for _, ps := range parts {
		ps.revoke()
	}
}

// fetchLoop fetches one partition and dispatches its records until ctx
// ends. A record is fetched before a slot is taken, so that a partition
// with nothing to read never holds a slot that another partition needs.
func (c *Consumer) fetchLoop(ctx context.Context, r PartitionReader, ps *partState, inGen *sync.WaitGroup, d *dispatcher[delivery]) {
	failures := 0
	for {
		if !c.pause.AwaitFetch(ctx) {
			return
		}
		msg, err := r.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Error("fetch failed, retrying", slog.String("topic", ps.topic), slog.Int("partition", ps.partition),
				slog.String("error", err.Error()))
			if sleep(ctx, fetchDelay(failures)) != nil {
				return
			}
			failures++
			continue
		}
		failures = 0
		fetched := c.now()
		// A record fetched while paused waits here, unless it is let
		// through as the probe event of an outage no event is held for. A
		// tier record may be that probe only once it may be handled.
		eligible := fetched
		if c.opts.Tier > 0 {
			eligible, _ = c.notBefore(msg, fetched)
		}
		held, ok := c.pause.Admit(ctx, eligible)
		if !ok {
			msg.held.release()
			return
		}
		size := recordBytes(msg)
		if !c.budget.acquire(ctx, size) {
			held.Leave()
			msg.held.release()
			return
		}
		if !d.acquire(ctx) {
			held.Leave()
			c.budget.release(size)
			msg.held.release()
			return
		}
		if !ps.fetched(msg.Offset) {
			held.Leave()
			<-d.slots
			c.budget.release(size)
			msg.held.release()
			return
		}
		inGen.Add(1)
		c.inFlight.Add(1)
		ps.inFlightG.Inc()
		d.dispatch(delivery{msg: msg, fetched: fetched, stop: ctx, part: ps, gen: inGen, held: held})
	}
}

// process takes one event to a final outcome, or leaves it not final when
// shutdown or a rebalance interrupts it. Waits that are not work
// (x-not-before, outage backoff) end with dl.stop; work ends with work.
func (c *Consumer) process(work context.Context, dl delivery) {
	dl.msg.dated = new(time.Time) // the handler's note, for final's eventTime
	msg := dl.msg
	held := dl.held // the outages this event met: its next try is a probe of them
	defer held.Leave()
	defer func() {
		dl.part.inFlightG.Dec()
		c.inFlight.Add(-1)
		c.budget.release(recordBytes(msg))
		msg.held.release()
		dl.gen.Done()
	}()
	stop := dl.stop
	// The event's logger is built only when something is logged: With
	// formats its attributes at once, and the common path logs nothing
	// above debug.
	log := func() *slog.Logger {
		l := c.log.With(slog.String("topic", msg.Topic), slog.Int("partition", msg.Partition), slog.Int64("offset", msg.Offset))
		if tp, ok := TraceParent(msg); ok {
			l = l.With(slog.String("trace_id", tp.TraceIDString()))
		}
		return l
	}

	if c.opts.Tier > 0 && !c.waitNotBefore(stop, msg, dl.fetched) {
		return
	}
	start := c.now() // after the wait: handle latency is the work, not the delay
	var waiting waitForAttempt
	defer waiting.end(c, log)
	for attempt := 0; ; attempt++ {
		began := c.pause.ResumeCount()
		outcome, err := c.handle(work, msg, log)
		if err == nil {
			held.Answered(outcome)
			c.final(dl, outcome, start)
			if c.log.Enabled(work, slog.LevelDebug) {
				log().Debug("event handled", slog.String("outcome", string(outcome)))
			}
			return
		}
		d := c.policy.Decide(err, c.opts.Tier, attempt)
		if work.Err() != nil {
			d = order.Decision{Action: order.ActionLeave, Class: order.ClassCanceled}
		}
		switch d.Action {
		case order.ActionLeave:
			log().Info("event interrupted by shutdown, left uncommitted")
			return
		case order.ActionWait:
			// Another path's attempt of the invoice is in flight, and this
			// event has sent nothing: it looks again later, and gives way
			// (uncommitted, for whoever owns the partition next) rather
			// than hold up a rebalance or a drain.
			waiting.begin(c, msg.Topic, err, log)
			if sleep(stop, d.Delay) != nil {
				log().Info("event waiting for another attempt of its invoice gave way to shutdown or a rebalance, left uncommitted")
				return
			}
			continue
		case order.ActionPause:
			var oe *order.OutageError
			dep := order.Dependency("dependency")
			if errors.As(err, &oe) {
				dep = oe.Dependency
			}
			if c.pause.Stale(dep, began) {
				continue // an outage that ended while this attempt was in flight
			}
			held.Meet(dep, err)
			if held.HoldOff(stop, dep, d.Delay) != nil {
				log().Info("event interrupted by shutdown or a rebalance during an outage, left uncommitted")
				return
			}
			continue
		}
		var ve *order.ValidationError
		if !errors.As(err, &ve) {
			held.Answered("") // the dependency answered, though not with success
		}
		outcome, rerr := c.router.route(work, stop, msg, c.opts.Tier, d, err)
		if rerr != nil {
			log().Info("event interrupted by shutdown or a rebalance while routing, left uncommitted", slog.String("error", rerr.Error()))
			return
		}
		c.final(dl, outcome, start)
		return
	}
}

// waitForAttempt is an event's wait for another path's attempt of its
// invoice (the fence, docs/interface.md §4): counted and logged once when it
// begins, and when it ends, so a wait that holds a partition's commits is
// seen (billing_attempt_waits_total, billing_attempt_waiting).
type waitForAttempt struct {
	since   time.Time
	orderID string
}

// begin records the start of the wait that err (an *order.AttemptBusyError)
// asks for; a wait already begun goes on.
func (w *waitForAttempt) begin(c *Consumer, topic string, err error, log func() *slog.Logger) {
	if !w.since.IsZero() {
		return
	}
	w.since = c.now()
	var wait time.Duration
	if be, ok := errors.AsType[*order.AttemptBusyError](err); ok {
		w.orderID, wait = be.OrderID, be.Wait
	}
	c.m.AttemptWaits.WithLabelValues(topic).Inc()
	c.m.AttemptWaiting.Inc()
	log().Info("event waits for another attempt of its invoice: its key may be at the gateway",
		slog.String("order_id", w.orderID), slog.Duration("attempt_ends_within", wait))
}

// end records the end of a wait that began, however the event went on.
func (w *waitForAttempt) end(c *Consumer, log func() *slog.Logger) {
	if w.since.IsZero() {
		return
	}
	c.m.AttemptWaiting.Dec()
	log().Info("event waited for another attempt of its invoice", slog.String("order_id", w.orderID),
		slog.Duration("waited", c.now().Sub(w.since)))
}

// handle runs the handler; a panic becomes the record's permanent error
// (dead-lettered with the panic in x-error), logged once with its stack, so
// one bad record cannot crash every pod that reads it in turn.
func (c *Consumer) handle(ctx context.Context, msg Record, log func() *slog.Logger) (outcome order.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.m.HandlerPanics.Inc()
			err = &order.PermanentError{Op: "handle record", Err: fmt.Errorf("panic: %v", p)}
			log().Error("panic while handling a record; it goes to the dead-letter topic",
				slog.String("error", truncateUTF8(oneLine(err.Error()), 1024)), slog.String("stack", string(debug.Stack())))
		}
	}()
	if msg.HeadersDropped > 0 {
		return "", &order.PermanentError{Op: "read record", Err: fmt.Errorf(
			"%d headers of its own, more than the %d a record may carry: dead-lettered without its value; the original stays at x-original-*",
			msg.HeadersDropped, MaxRecordHeaders)}
	}
	if msg.BatchOmitted != "" {
		// docs/interface.md §5: never decompressed past the bound, each record of
		// such a batch dead-lettered as a stub whose size is unknown.
		return "", &order.PermanentError{Op: "read record", Err: fmt.Errorf(
			"%s/%d: %s, over BILLING_KAFKA_MAX_BATCH_BYTES: not decoded, dead-lettered without its value",
			msg.Topic, msg.Partition, msg.BatchOmitted)}
	}
	return c.handler.Handle(ctx, msg)
}

// final counts the record's outcome on this hop and marks its offset done.
// The delay SLI is observed only where the event itself is final: a record
// routed to a retry tier is observed again when that tier settles it, so
// one order is one observation however many tiers it goes through
// (docs/interface.md §8); a dead-lettered one is final, and observed. A replayed
// record (x-replayed-at) is counted in billing_replayed_events_total and
// never observed in the SLI again: its event was, when it was dead-lettered.
//
// The outcome is counted last: whoever sees it counted (a test, a scrape)
// sees the record's other observations too.
func (c *Consumer) final(dl delivery, outcome order.Outcome, start time.Time) {
	now := c.now()
	c.m.HandleDuration.Observe(now.Sub(start).Seconds())
	switch {
	case replayed(dl.msg):
		c.m.ReplayedEvents.WithLabelValues(string(outcome)).Inc()
	case outcome != order.OutcomeRetried:
		c.m.EventDelay.Observe(now.Sub(eventTime(dl.msg)).Seconds())
	}
	if ctr, ok := c.events[outcome]; ok {
		ctr.Inc()
	} else {
		c.m.Events.WithLabelValues(string(outcome)).Inc()
	}
	dl.part.done(dl.msg.Offset)
}

// waitNotBefore holds a retry record until its x-not-before, but no longer
// than the tier's delay from when it was fetched: a later or unreadable value
// is clamped to that (docs/interface.md §5). One delay per tier keeps each tier in
// time order, so waiting here blocks nothing that could go earlier.
func (c *Consumer) waitNotBefore(stop context.Context, msg Record, fetched time.Time) bool {
	until, err := c.notBefore(msg, fetched)
	if err != nil {
		v, _ := msg.Header(HeaderNotBefore)
		c.log.Warn("unreadable x-not-before, waiting the tier's delay", slog.Int("partition", msg.Partition),
			slog.Int64("offset", msg.Offset), HeaderValueAttr("value", v))
	}
	wait := until.Sub(c.now())
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop.Done():
		return false
	}
}

// notBefore is when a record of this tier fetched at fetched may be
// handled: its x-not-before clamped to the tier's delay from fetched, that
// delay when the value is unreadable (the error), fetched when it has none.
func (c *Consumer) notBefore(msg Record, fetched time.Time) (time.Time, error) {
	v, ok := msg.Header(HeaderNotBefore)
	if !ok {
		return fetched, nil
	}
	until := fetched.Add(c.policy.TierDelay(c.opts.Tier))
	nb, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return until, err
	}
	if nb.Before(until) {
		until = nb
	}
	return until, nil
}

// commit commits, through gen, the watermarks of gen's partitions that
// moved. A failed commit (a rebalance in progress, a broker away) is logged
// and tried again next time: the watermark only grows, and a lost commit
// only means redelivery, which dedup absorbs. The coordinator connection's
// timeout bounds the call.
func (c *Consumer) commit(gen Generation, parts []*partState) {
	offsets := map[string]map[int]int64{}
	var moved []*partState
	var marks []int64
	for _, ps := range parts {
		w, ok := ps.committable()
		if !ok {
			continue
		}
		if offsets[ps.topic] == nil {
			offsets[ps.topic] = map[int]int64{}
		}
		offsets[ps.topic][ps.partition] = w
		moved, marks = append(moved, ps), append(marks, w)
	}
	if len(moved) == 0 {
		return
	}
	if err := gen.CommitOffsets(offsets); err != nil {
		c.m.Commits.WithLabelValues("error").Inc()
		c.log.Warn("offset commit failed; will retry", slog.Int("generation", int(gen.ID())), slog.String("error", err.Error()))
		return
	}
	c.m.Commits.WithLabelValues("ok").Inc()
	for i, ps := range moved {
		ps.markCommitted(marks[i])
	}
}
