// Package relay is the outbox relay, a background service of every pod: it
// publishes the invoice events that billing's transitions left in the
// outbox (order.Outbox) through an order.EventPublisher, at least once,
// without ever holding billing back (docs/design.md, "Billing publishes
// what it decided"). Pass is one batch; Start runs passes until Stop.
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/service"
)

// Defaults of Options.
const (
	DefaultBatch      = 500
	DefaultIdle       = 50 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	DefaultStatsEvery = 5 * time.Second
	DefaultTimeout    = 30 * time.Second
)

// Options configures a Relay; zero values take the defaults.
type Options struct {
	// Batch bounds the events of one pass (one Kafka write, one
	// transaction).
	Batch int
	// Idle is the pause after a pass that found less than a batch: how
	// late, at most, a new event is seen. A full batch is followed by the
	// next pass at once.
	Idle time.Duration
	// MaxBackoff bounds the pause after failed passes (Kafka refusing
	// writes, Postgres down), which doubles from Idle.
	MaxBackoff time.Duration
	// PassTimeout bounds one pass, its publish included.
	PassTimeout time.Duration
	// StatsEvery is how often the outbox is counted (Metrics' gauges).
	StatsEvery time.Duration
	// Metrics receives the published events
	// (billing_published_events_total, the publish lag), the outbox's size
	// and age every StatsEvery whether or not the passes publish, and a
	// stamp per completed pass: one that published what it found (or found
	// nothing) and, when they were due, read the stats
	// (billing_background_last_success_timestamp_seconds). nil records
	// nothing.
	Metrics *metrics.Relay
	// Logger receives a line per failed pass; nil discards them.
	Logger *slog.Logger
}

// Relay publishes the outbox's events, in every pod: billing decides and
// commits, the relay tells the rest of the system afterwards. While the
// publisher fails, the outbox grows and nothing is lost.
type Relay struct {
	outbox    order.Outbox
	publisher order.EventPublisher
	opts      Options
	log       *slog.Logger
	run       service.Base
	now       func() time.Time
}

var _ service.Service = (*Relay)(nil)

// New returns a relay from outbox to publisher; it does nothing until
// Start or Pass.
func New(outbox order.Outbox, publisher order.EventPublisher, opts Options) *Relay {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultIdle
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.Idle)
	if opts.PassTimeout <= 0 {
		opts.PassTimeout = DefaultTimeout
	}
	if opts.StatsEvery <= 0 {
		opts.StatsEvery = DefaultStatsEvery
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{outbox: outbox, publisher: publisher, opts: opts, log: log, now: time.Now}
}

// Start runs passes in a goroutine until ctx ends or Stop is called.
func (r *Relay) Start(ctx context.Context) error { return r.run.Start(ctx, r.loop) }

// Stop ends the passes, cancelling one in progress (its events stay in the
// outbox), and waits for the goroutine.
func (r *Relay) Stop() { r.run.Stop() }

// schedule is the loop's state between passes: when the stats are next
// due and how many passes in a row failed.
type schedule struct {
	failures  int
	nextStats time.Time
}

func (r *Relay) loop(ctx context.Context) {
	var s schedule
	for {
		wait, again := r.step(ctx, &s)
		if !again {
			return
		}
		if wait > 0 && !service.Sleep(ctx, wait) {
			return
		}
	}
}

// step is one turn of the loop, without its pause: the stats when due,
// a pass, its log line and its stamp. It returns how long to wait before
// the next turn (0: at once, a full batch left more waiting) and false
// once ctx has ended.
func (r *Relay) step(ctx context.Context, s *schedule) (time.Duration, bool) {
	var statsErr error
	if now := r.now(); !now.Before(s.nextStats) {
		statsErr = r.stats(ctx)
		s.nextStats = now.Add(r.opts.StatsEvery)
	}
	n, err := r.Pass(ctx)
	if err == nil && statsErr == nil && ctx.Err() == nil {
		r.opts.Metrics.Passed()
	}
	switch {
	case ctx.Err() != nil:
		return 0, false
	case err != nil:
		s.failures++
		wait := order.Backoff{Min: r.opts.Idle, Max: r.opts.MaxBackoff}.Delay(s.failures)
		r.log.Warn("outbox relay pass failed; events stay in the outbox", slog.String("error", err.Error()),
			slog.Int("failures", s.failures), slog.Duration("next_in", wait))
		return wait, true
	case n == r.opts.Batch:
		s.failures = 0
		return 0, true // more are waiting
	default:
		s.failures = 0
		return r.opts.Idle, true
	}
}

// stats counts the outbox for the gauges; a failure logs, and the pass
// does not count as completed.
func (r *Relay) stats(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, r.opts.PassTimeout)
	defer cancel()
	st, err := r.outbox.OutboxStats(sctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("outbox stats", slog.String("error", err.Error()))
		}
		return err
	}
	r.opts.Metrics.Outbox(st)
	return nil
}

// Pass publishes one batch within PassTimeout and returns how many events
// it published. It is the loop's work without the loop: tests and
// commands call it directly.
func (r *Relay) Pass(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.PassTimeout)
	defer cancel()
	var published []order.InvoiceEvent
	n, err := r.outbox.PublishPending(ctx, r.opts.Batch, func(ctx context.Context, events []order.InvoiceEvent) error {
		if err := r.publisher.Publish(ctx, events); err != nil {
			return err
		}
		published = events
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("publish invoice events: %w", err)
	}
	if n > 0 {
		r.opts.Metrics.Published(published, r.now())
	}
	return n, nil
}
