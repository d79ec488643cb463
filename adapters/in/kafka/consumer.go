package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// Source is a consumer-group reader: *kafka.Reader with CommitInterval 0.
type Source interface {
	FetchMessage(ctx context.Context) (kafkago.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafkago.Message) error
}

// MessageHandler handles one record and returns its outcome.
type MessageHandler interface {
	Handle(ctx context.Context, msg kafkago.Message) (order.Outcome, error)
}

// Options configures a Consumer.
type Options struct {
	// Tier is 0 for the main topic, N for retry tier N: a tier waits for each
	// record's x-not-before and routes its failures to tier N+1.
	Tier int
	// MaxInFlight bounds the events handled at once (1: sequential).
	MaxInFlight int
	// CommitInterval coalesces commits (default 200ms).
	CommitInterval time.Duration
	// DrainTimeout bounds the wait for in-flight events after Run's ctx ends.
	DrainTimeout time.Duration
	// OutageBackoffMin and Max bound the wait between retries of an event
	// that met an outage (default 500ms, 15s).
	OutageBackoffMin, OutageBackoffMax time.Duration
}

// Consumer consumes one topic. See the package documentation.
type Consumer struct {
	src     Source
	handler MessageHandler
	router  *Router
	pause   *Pause
	m       *metrics.Metrics
	log     *slog.Logger
	opts    Options
	track   *tracker
	now     func() time.Time
}

// OrderConfirmedConsumer is the consumer of the main topic; the name is the
// one the style guide uses. Retry tiers use the same type with a Tier.
type OrderConfirmedConsumer = Consumer

// NewConsumer returns a consumer of src handling records with h and routing
// failures through r.
func NewConsumer(src Source, h MessageHandler, r *Router, pause *Pause, m *metrics.Metrics, log *slog.Logger, o Options) *Consumer {
	if o.MaxInFlight < 1 {
		o.MaxInFlight = 1
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = 200 * time.Millisecond
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 25 * time.Second
	}
	if o.OutageBackoffMin <= 0 {
		o.OutageBackoffMin = 500 * time.Millisecond
	}
	if o.OutageBackoffMax <= 0 {
		o.OutageBackoffMax = 15 * time.Second
	}
	return &Consumer{src: src, handler: h, router: r, pause: pause, m: m, log: log.With(slog.Int("tier", o.Tier)),
		opts: o, track: newTracker(), now: time.Now}
}

// Run consumes until ctx ends, then stops fetching, lets in-flight events
// finish within DrainTimeout, commits what finished and returns nil. Events
// not final by then stay uncommitted and come back to whoever owns their
// partition next. It returns an error only when fetching fails for good.
func (c *Consumer) Run(ctx context.Context) error {
	// Work outlives ctx by up to DrainTimeout: shutdown is not a failure of
	// the events in flight.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	d := newDispatcher(c.opts.MaxInFlight, func(msg kafkago.Message) { c.process(ctx, workCtx, msg) })

	commitDone := make(chan struct{})
	stopCommits := make(chan struct{})
	go func() {
		defer close(commitDone)
		c.commitLoop(stopCommits)
	}()

	fetchErr := c.fetchLoop(ctx, d)

	// Drain.
	select {
	case <-d.idle():
	case <-time.After(c.opts.DrainTimeout):
		c.log.Warn("drain budget spent; events still in flight stay uncommitted",
			slog.Int("in_flight", c.track.inFlight()))
		cancelWork()
	}
	d.close()
	close(stopCommits)
	<-commitDone
	return fetchErr
}

// fetchLoop fetches and dispatches until ctx ends or the source is closed.
func (c *Consumer) fetchLoop(ctx context.Context, d *dispatcher) error {
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	failures := 0
	for {
		if !c.pause.Wait(ctx) || !d.acquire(ctx) {
			return nil
		}
		msg, err := c.src.FetchMessage(ctx)
		if err != nil {
			<-d.slots
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrClosedPipe):
				return fmt.Errorf("fetch: reader closed: %w", err)
			}
			c.log.Error("fetch failed, retrying", slog.String("error", err.Error()))
			if bo.wait(ctx, failures) != nil {
				return nil
			}
			failures++
			continue
		}
		failures = 0
		c.track.fetched(msg)
		c.m.InFlight.WithLabelValues(msg.Topic).Inc()
		d.dispatch(msg)
	}
}

// process takes one event to a final outcome, or leaves it not final when
// shutdown interrupts it. stop ends waits that are not work (x-not-before,
// outage backoff); work ends the work itself.
func (c *Consumer) process(stop, work context.Context, msg kafkago.Message) {
	defer c.m.InFlight.WithLabelValues(msg.Topic).Dec()
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

	if c.opts.Tier > 0 && !c.waitNotBefore(stop, msg) {
		return
	}
	start := c.now() // after the wait: handle latency is the work, not the delay
	bo := backoff{min: c.opts.OutageBackoffMin, max: c.opts.OutageBackoffMax}
	for attempt := 0; ; attempt++ {
		outcome, err := c.handler.Handle(work, msg)
		if err == nil {
			c.pause.Resume("billing")
			c.final(msg, outcome, start)
			if c.log.Enabled(work, slog.LevelDebug) {
				log().Debug("event handled", slog.String("outcome", string(outcome)))
			}
			return
		}
		class := order.Classify(err)
		if work.Err() != nil {
			class = order.ClassCanceled
		}
		switch class {
		case order.ClassCanceled:
			log().Info("event interrupted by shutdown, left uncommitted")
			return
		case order.ClassOutage:
			var oe *order.OutageError
			dep := "dependency"
			if errors.As(err, &oe) {
				dep = oe.Dependency
			}
			c.pause.Outage(dep, err)
			if bo.wait(stop, attempt) != nil {
				log().Info("event interrupted by shutdown during an outage, left uncommitted")
				return
			}
			continue
		}
		var ve *order.ValidationError
		if !errors.As(err, &ve) {
			c.pause.Resume("billing") // a dependency answered
		}
		outcome, rerr := c.router.Route(work, msg, c.opts.Tier, class, err)
		if rerr != nil {
			log().Info("event interrupted by shutdown while routing, left uncommitted", slog.String("error", rerr.Error()))
			return
		}
		c.final(msg, outcome, start)
		return
	}
}

func (c *Consumer) final(msg kafkago.Message, outcome order.Outcome, start time.Time) {
	c.m.Events.WithLabelValues(string(outcome)).Inc()
	now := c.now()
	c.m.HandleDuration.Observe(now.Sub(start).Seconds())
	c.m.EventDelay.Observe(now.Sub(eventTime(msg)).Seconds())
	c.track.done(msg)
}

// waitNotBefore holds a retry record until its x-not-before. One delay per
// tier keeps each tier in time order, so waiting here blocks nothing that
// could go earlier.
func (c *Consumer) waitNotBefore(stop context.Context, msg kafkago.Message) bool {
	v, ok := Header(msg, HeaderNotBefore)
	if !ok {
		return true
	}
	nb, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		c.log.Warn("unreadable x-not-before, handling now", slog.String("value", v))
		return true
	}
	wait := nb.Sub(c.now())
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

// commitLoop commits watermarks every CommitInterval, and once more when
// stop is closed (after the drain).
func (c *Consumer) commitLoop(stop <-chan struct{}) {
	t := time.NewTicker(c.opts.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.commit()
		case <-stop:
			c.commit()
			return
		}
	}
}

// commit commits what the tracker allows. A failed commit (a rebalance in
// progress, a broker away) is logged and tried again next time: the
// watermark only grows, and a lost commit only means redelivery, which
// dedup absorbs.
func (c *Consumer) commit() {
	msgs := c.track.committable()
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.src.CommitMessages(ctx, msgs...); err != nil {
		c.m.Commits.WithLabelValues("error").Inc()
		c.log.Warn("offset commit failed; will retry", slog.String("error", err.Error()))
		return
	}
	c.m.Commits.WithLabelValues("ok").Inc()
	c.track.markCommitted(msgs)
}
