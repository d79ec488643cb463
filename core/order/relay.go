package order

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/acme/billing/core/startstop"
)

// Outbox is where the invoice events of committed transitions wait to be
// published (CONTRACT.md §9): written in the transition's own transaction,
// removed once published.
type Outbox interface {
	// PublishPending, in one transaction: claims up to limit events that
	// no other relay holds, the oldest of each order only (so one order's
	// events leave in the order of its transitions), calls publish with
	// them, and removes them when publish returns nil; when it returns an
	// error they stay, for the next pass. It returns how many it removed.
	PublishPending(ctx context.Context, limit int, publish func(ctx context.Context, events []InvoiceEvent) error) (int, error)
	// OutboxStats counts the events waiting and ages the oldest.
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// OutboxStats is what billing_outbox_pending and
// billing_outbox_oldest_seconds report.
type OutboxStats struct {
	Pending int
	Oldest  time.Duration // since the oldest waiting event's transition; 0 when none
}

// Defaults of RelayOptions.
const (
	DefaultRelayBatch      = 500
	DefaultRelayIdle       = 50 * time.Millisecond
	DefaultRelayMaxBackoff = 5 * time.Second
	DefaultRelayStatsEvery = 5 * time.Second
	DefaultRelayTimeout    = 30 * time.Second
)

// RelayOptions configures an OutboxRelay; zero values take the defaults.
type RelayOptions struct {
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
	// StatsEvery is how often the outbox is counted (Stats).
	StatsEvery time.Duration
	// Published is told the events of each pass that were published
	// (billing_published_events_total, the publish lag); nil drops them.
	Published func(events []InvoiceEvent, at time.Time)
	// Stats receives the outbox's size and age every StatsEvery; nil drops them.
	Stats func(OutboxStats)
	// Logger receives a line per failed pass; nil discards them.
	Logger *slog.Logger
}

// OutboxRelay publishes the outbox's events, in every pod: billing decides
// and commits, the relay tells the rest of the system afterwards, at least
// once, without ever holding billing back. While the publisher fails, the
// outbox grows and nothing is lost.
type OutboxRelay struct {
	outbox    Outbox
	publisher EventPublisher
	opts      RelayOptions
	log       *slog.Logger
	run       startstop.Base
	now       func() time.Time
}

// NewOutboxRelay returns a relay from outbox to publisher; it does nothing
// until Start or RunOnce.
func NewOutboxRelay(outbox Outbox, publisher EventPublisher, opts RelayOptions) *OutboxRelay {
	if opts.Batch <= 0 {
		opts.Batch = DefaultRelayBatch
	}
	if opts.Idle <= 0 {
		opts.Idle = DefaultRelayIdle
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultRelayMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.Idle)
	if opts.PassTimeout <= 0 {
		opts.PassTimeout = DefaultRelayTimeout
	}
	if opts.StatsEvery <= 0 {
		opts.StatsEvery = DefaultRelayStatsEvery
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &OutboxRelay{outbox: outbox, publisher: publisher, opts: opts, log: log, now: time.Now}
}

// Start runs passes in a goroutine until ctx ends or Stop is called.
func (r *OutboxRelay) Start(ctx context.Context) error { return r.run.Start(ctx, r.loop) }

// Stop ends the passes, cancelling one in progress (its events stay in the
// outbox), and waits for the goroutine.
func (r *OutboxRelay) Stop() { r.run.Stop() }

func (r *OutboxRelay) loop(ctx context.Context) {
	var (
		failures  int
		nextStats time.Time
	)
	for {
		if now := r.now(); !now.Before(nextStats) {
			r.stats(ctx)
			nextStats = now.Add(r.opts.StatsEvery)
		}
		n, err := r.RunOnce(ctx)
		wait := r.opts.Idle
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			wait = Backoff{Min: r.opts.Idle, Max: r.opts.MaxBackoff}.Delay(failures)
			r.log.Warn("outbox relay pass failed; events stay in the outbox", slog.String("error", err.Error()),
				slog.Int("failures", failures), slog.Duration("next_in", wait))
		case n == r.opts.Batch:
			failures = 0
			continue // more are waiting
		default:
			failures = 0
		}
		if !startstop.Sleep(ctx, wait) {
			return
		}
	}
}

// stats counts the outbox for the gauges; a failure only logs.
func (r *OutboxRelay) stats(ctx context.Context) {
	if r.opts.Stats == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, r.opts.PassTimeout)
	defer cancel()
	st, err := r.outbox.OutboxStats(sctx)
	if err != nil {
		r.log.Warn("outbox stats", slog.String("error", err.Error()))
		return
	}
	r.opts.Stats(st)
}

// RunOnce publishes one batch within PassTimeout and returns how many
// events it published.
func (r *OutboxRelay) RunOnce(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.PassTimeout)
	defer cancel()
	var published []InvoiceEvent
	n, err := r.outbox.PublishPending(ctx, r.opts.Batch, func(ctx context.Context, events []InvoiceEvent) error {
		if err := r.publisher.Publish(ctx, events); err != nil {
			return err
		}
		published = events
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("publish invoice events: %w", err)
	}
	if r.opts.Published != nil && n > 0 {
		r.opts.Published(published, r.now())
	}
	return n, nil
}
