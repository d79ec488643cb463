// Package completer is the pending completer, a background service of
// every pod: it resumes invoices left pending (their event dead-lettered
// after the last tier, or its pod lost) under their recorded key, before
// the gateway forgets the key, and holds those whose key is too old to send
// again (docs/design.md, "Rejected, held, reopened"). Pass is one pass;
// Start runs passes until Stop. The rules of each resume are core/order's
// (BillingService.Resume); the claim and the stats are order.PendingLedger's.
package completer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/service"
)

// Defaults of Options.
const (
	DefaultPendingResumeAfter = 15 * time.Minute
	DefaultInterval           = time.Minute
	DefaultTimeout            = time.Minute
	DefaultBatch              = 100
	DefaultMaxWait            = time.Hour
)

// Options configures a Completer; zero values take the
// defaults above.
type Options struct {
	// ResumeAfter is BILLING_PENDING_RESUME_AFTER: an invoice pending under
	// its key for longer is resumed.
	ResumeAfter time.Duration
	// Interval is the pause between passes (DefaultInterval, or a
	// quarter of ResumeAfter when that is shorter).
	Interval time.Duration
	// PassTimeout bounds one pass. It is also the shortest back-off, so a
	// claim outlives the pass that made it.
	PassTimeout time.Duration
	// BatchSize bounds the invoices of one pass.
	BatchSize int
	// Backoff is the first wait after an attempt (PassTimeout when shorter
	// or 0); each later attempt doubles it up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Metrics receives the stats read from Postgres at every pass (the
	// gauges), also a pass whose other steps fail, and a stamp per pass
	// that completed: its steps all succeeded, or it sent nothing because
	// Paused said so (billing_background_last_success_timestamp_seconds);
	// nil records nothing.
	Metrics *metrics.Completer
	// Logger receives a line per resumed invoice and per failed pass; nil
	// discards them.
	Logger *slog.Logger
	// Paused, when set, says whether consumption is paused by a reason that
	// stops every path that sends a key (an operator's `billing consume
	// pause`, a release this one is not safe beside), and why. A pass asks
	// it first and before each invoice: while paused it sends nothing,
	// refreshes the stats and ends (Result.Paused); such a pass
	// counts as completed.
	Paused func() (paused bool, why string)
}

// Result is what one pass did.
type Result struct {
	Claimed  int
	Outcomes map[order.Outcome]int // settled charged or declined
	Failed   int                   // still pending (transient) or rejected
	Held     int                   // held: claimed and found (or made) held, or held by the pass's sweep
	Skipped  int                   // another path's attempt in flight, or the invoice moved on since the claim
	Stopped  error                 // an outage or cancellation that ended the pass early
	// Paused says why the pass sent nothing more: consumption was paused
	// (Options.Paused) when it began or before an invoice. Such a
	// pass did what it may do, and is complete.
	Paused string
}

// Completer resumes invoices left pending under their recorded key.
// Several processes may run one each: the claim hands each due invoice to
// one of them per back-off period.
type Completer struct {
	ledger  order.PendingLedger
	billing *order.BillingService
	opts    Options
	log     *slog.Logger
	run     service.Base
}

var _ service.Service = (*Completer)(nil)

// New returns a completer resuming through billing; it does
// nothing until Start or Pass.
func New(ledger order.PendingLedger, billing *order.BillingService, opts Options) *Completer {
	if opts.ResumeAfter <= 0 {
		opts.ResumeAfter = DefaultPendingResumeAfter
	}
	if opts.Interval <= 0 {
		// A few passes per ResumeAfter, so an invoice waits little past it.
		opts.Interval = min(DefaultInterval, opts.ResumeAfter/4)
	}
	if opts.PassTimeout <= 0 {
		opts.PassTimeout = DefaultTimeout
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatch
	}
	opts.Backoff = max(opts.Backoff, opts.PassTimeout)
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxWait
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.Backoff)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Completer{ledger: ledger, billing: billing, opts: opts, log: log}
}

// Start runs a pass now and then one Interval after each, in a goroutine,
// until ctx ends or Stop is called.
func (c *Completer) Start(ctx context.Context) error { return c.run.Start(ctx, c.loop) }

// Stop ends the background passes, cancelling one in progress (its claimed
// invoices wait for their back-off), and waits for the goroutine.
func (c *Completer) Stop() { c.run.Stop() }

// paused returns why consumption is paused, "" when it is not.
func (c *Completer) paused() string {
	if c.opts.Paused == nil {
		return ""
	}
	if paused, why := c.opts.Paused(); paused {
		return why
	}
	return ""
}

func (c *Completer) loop(ctx context.Context) {
	for {
		res, err := c.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.log.Warn("pending completer pass failed", slog.String("error", err.Error()))
		case res.Stopped != nil:
			c.log.Warn("pending completer pass stopped early", slog.Int("claimed", res.Claimed), slog.String("error", res.Stopped.Error()))
		case res.Paused != "":
			c.log.Debug("pending completer pass sent nothing: consumption is paused", slog.String("why", res.Paused))
		}
		if !service.Sleep(ctx, c.opts.Interval) {
			return
		}
	}
}

// refreshStats reads the stats and sets the gauges from them.
func (c *Completer) refreshStats(ctx context.Context) (order.PendingStats, error) {
	stats, err := c.ledger.PendingStats(ctx)
	if err != nil {
		return stats, fmt.Errorf("pending stats: %w", err)
	}
	c.opts.Metrics.Pending(stats)
	return stats, nil
}

// Pass runs one pass within PassTimeout: it holds the invoices whose
// key is too old to send again, refreshes the stats (whether or not the
// hold succeeded: the gauges must not keep an old value while the invoices
// they count age), claims the due invoices and resumes each
// (order.BillingService.Resume: only with its attempt, only if still pending
// under the key it was claimed with). An outage (Postgres or the gateway
// unavailable) ends the pass without touching the rest: their claim only
// delays them by one back-off, and nothing is settled on a guess. While
// consumption is paused (Paused), when it begins, it only refreshes the
// stats, and from an invoice on it sends nothing more. A pass that
// completed is stamped in Metrics.
func (c *Completer) Pass(ctx context.Context) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.PassTimeout)
	defer cancel()
	res, err := c.pass(ctx)
	if err == nil && res.Stopped == nil {
		c.opts.Metrics.Passed()
	}
	return res, err
}

// pass is Pass's work.
func (c *Completer) pass(ctx context.Context) (Result, error) {
	res := Result{Outcomes: map[order.Outcome]int{}}
	if res.Paused = c.paused(); res.Paused != "" {
		// Holding stale invoices is a transition too: it waits with the
		// rest. Nothing is sent meanwhile, and the first pass after the
		// pause holds them before it claims anything.
		_, err := c.refreshStats(ctx)
		return res, err
	}
	held, holdErr := c.ledger.HoldStale(ctx, c.billing.Terms())
	if holdErr != nil {
		holdErr = fmt.Errorf("hold stale invoices: %w", holdErr)
	}
	for _, orderID := range held {
		res.Held++
		c.log.Warn("pending invoice held: its key is past half of BILLING_GATEWAY_KEY_TTL", slog.String("order_id", orderID))
	}
	stats, err := c.refreshStats(ctx)
	if err != nil {
		return res, errors.Join(holdErr, err)
	}
	// A failed hold does not stop the resumes: each one's take holds its
	// invoice instead of sending a key too old (TakeAttempt), and the pass
	// still fails.
	if stats.Count == 0 {
		return res, holdErr
	}

	invs, err := c.ledger.ClaimPending(ctx, order.PendingClaim{
		OlderThan: c.opts.ResumeAfter, Limit: c.opts.BatchSize,
		Backoff: c.opts.Backoff, MaxBackoff: c.opts.MaxBackoff,
	})
	if err != nil {
		return res, errors.Join(holdErr, fmt.Errorf("claim pending invoices: %w", err))
	}
	res.Claimed = len(invs)
	for _, inv := range invs {
		if res.Paused = c.paused(); res.Paused != "" {
			// The rest keep their claim's back-off: no key leaves while
			// consumption is paused.
			return res, holdErr
		}
		outcome, err := c.billing.Resume(ctx, inv.OrderID, inv.EventID)
		attrs := []any{slog.String("order_id", inv.OrderID), slog.String("key", inv.EventID.String())}
		cl := order.Classify(err)
		switch {
		case err == nil:
			res.Outcomes[outcome]++
			c.log.Info("pending invoice resumed", append(attrs, slog.String("outcome", string(outcome)))...)
		case errors.Is(err, order.ErrNotPending), cl == order.ClassBusy:
			// Another path has it, or had it and decided: nothing to do.
			res.Skipped++
			c.log.Debug("pending invoice skipped", append(attrs, slog.String("error", err.Error()))...)
		case errors.As(err, new(*order.HeldError)):
			res.Held++
			c.log.Warn("pending invoice held for a person", append(attrs, slog.String("error", err.Error()))...)
		case cl == order.ClassOutage, cl == order.ClassCanceled:
			res.Stopped = err
			return res, holdErr
		default:
			res.Failed++
			c.log.Warn("pending invoice not settled", append(attrs, slog.String("class", cl.String()), slog.String("error", err.Error()))...)
		}
		if ctx.Err() != nil {
			res.Stopped = ctx.Err()
			return res, holdErr
		}
	}
	return res, holdErr
}
