package order

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/acme/billing/core/startstop"
)

// Defaults of CompleterOptions.
const (
	DefaultPendingResumeAfter = 15 * time.Minute
	DefaultCompleterInterval  = time.Minute
	DefaultCompleterTimeout   = time.Minute
	DefaultCompleterBatch     = 100
	DefaultCompleterMaxWait   = time.Hour
)

// PendingStats is what billing_invoices_pending,
// billing_invoice_pending_oldest_seconds and billing_invoices_held report.
type PendingStats struct {
	Count  int
	Oldest time.Duration // how long the oldest pending invoice has been pending under its key; 0 when none
	Held   int           // invoices waiting for a person
}

// PendingClaim says which pending invoices a completer pass takes.
type PendingClaim struct {
	// OlderThan: pending under their current key for longer than this.
	OlderThan time.Duration
	// Limit bounds the invoices of one pass.
	Limit int
	// Backoff and MaxBackoff: a claimed invoice is not due again before
	// Backoff·2^(earlier claims), at most MaxBackoff. The wait is also the
	// claim itself: no other completer takes the invoice meanwhile.
	Backoff, MaxBackoff time.Duration
}

// PendingLedger is what the completer needs of the invoices.
type PendingLedger interface {
	// ClaimPending, in one transaction, takes the due invoices of c (oldest
	// first, skipping rows another transaction holds), moves each one's
	// next attempt past its back-off, and returns them.
	ClaimPending(ctx context.Context, c PendingClaim) ([]Invoice, error)
	// PendingStats counts the pending and the held invoices and ages the
	// oldest pending one.
	PendingStats(ctx context.Context) (PendingStats, error)
	// HoldStale holds every pending invoice whose key was first sent more
	// than terms.HoldAfter ago and that no live attempt holds, and returns
	// their order ids: whatever back-off the completer gave them, they must
	// not wait pending for a send that will never come.
	HoldStale(ctx context.Context, terms AttemptTerms) ([]string, error)
}

// CompleterOptions configures a PendingCompleter; zero values take the
// defaults above.
type CompleterOptions struct {
	// ResumeAfter is BILLING_PENDING_RESUME_AFTER: an invoice pending under
	// its key for longer is resumed.
	ResumeAfter time.Duration
	// Interval is the pause between passes (DefaultCompleterInterval, or a
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
	// Stats receives the pending count and oldest age at every pass (the
	// gauges); nil drops them.
	Stats func(PendingStats)
	// Logger receives a line per resumed invoice and per failed pass; nil
	// discards them.
	Logger *slog.Logger
}

// CompleterResult is what one pass did.
type CompleterResult struct {
	Claimed  int
	Outcomes map[Outcome]int // settled charged or declined
	Failed   int             // still pending (transient) or rejected
	Held     int             // held: claimed and found (or made) held, or held by the pass's sweep
	Skipped  int             // another path's attempt in flight, or the invoice moved on since the claim
	Stopped  error           // an outage or cancellation that ended the pass early
}

// PendingCompleter resumes invoices left pending (their event dead-lettered
// after the last tier, or its pod lost) under their recorded key, before the
// gateway forgets the key (CONTRACT.md §4; docs/design.md, "Rejected, held,
// reopened"). Several processes may run one each: the claim hands each due
// invoice to one of them per back-off period.
type PendingCompleter struct {
	ledger  PendingLedger
	billing *BillingService
	opts    CompleterOptions
	log     *slog.Logger
	run     startstop.Base
}

// NewPendingCompleter returns a completer resuming through billing; it does
// nothing until Start or RunOnce.
func NewPendingCompleter(ledger PendingLedger, billing *BillingService, opts CompleterOptions) *PendingCompleter {
	if opts.ResumeAfter <= 0 {
		opts.ResumeAfter = DefaultPendingResumeAfter
	}
	if opts.Interval <= 0 {
		// A few passes per ResumeAfter, so an invoice waits little past it.
		opts.Interval = min(DefaultCompleterInterval, opts.ResumeAfter/4)
	}
	if opts.PassTimeout <= 0 {
		opts.PassTimeout = DefaultCompleterTimeout
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultCompleterBatch
	}
	opts.Backoff = max(opts.Backoff, opts.PassTimeout)
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultCompleterMaxWait
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.Backoff)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PendingCompleter{ledger: ledger, billing: billing, opts: opts, log: log}
}

// Start runs a pass now and then one Interval after each, in a goroutine,
// until ctx ends or Stop is called.
func (c *PendingCompleter) Start(ctx context.Context) error { return c.run.Start(ctx, c.loop) }

// Stop ends the background passes, cancelling one in progress (its claimed
// invoices wait for their back-off), and waits for the goroutine.
func (c *PendingCompleter) Stop() { c.run.Stop() }

func (c *PendingCompleter) loop(ctx context.Context) {
	for {
		res, err := c.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.log.Warn("pending completer pass failed", slog.String("error", err.Error()))
		case res.Stopped != nil:
			c.log.Warn("pending completer pass stopped early", slog.Int("claimed", res.Claimed), slog.String("error", res.Stopped.Error()))
		}
		if !startstop.Sleep(ctx, c.opts.Interval) {
			return
		}
	}
}

// RunOnce runs one pass within PassTimeout: it holds the invoices whose
// key is too old to send again, refreshes the stats, claims the due
// invoices and resumes each (BillingService.Resume: only with its attempt,
// only if still pending under the key it was claimed with). An outage
// (Postgres or the gateway unavailable) ends the pass without touching the
// rest: their claim only delays them by one back-off, and nothing is
// settled on a guess.
func (c *PendingCompleter) RunOnce(ctx context.Context) (CompleterResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.PassTimeout)
	defer cancel()
	res := CompleterResult{Outcomes: map[Outcome]int{}}

	held, err := c.ledger.HoldStale(ctx, c.billing.Terms())
	if err != nil {
		return res, fmt.Errorf("hold stale invoices: %w", err)
	}
	for _, orderID := range held {
		res.Held++
		c.log.Warn("pending invoice held: its key is past half of BILLING_GATEWAY_KEY_TTL", slog.String("order_id", orderID))
	}
	stats, err := c.ledger.PendingStats(ctx)
	if err != nil {
		return res, fmt.Errorf("pending stats: %w", err)
	}
	if c.opts.Stats != nil {
		c.opts.Stats(stats)
	}
	if stats.Count == 0 {
		return res, nil
	}

	invs, err := c.ledger.ClaimPending(ctx, PendingClaim{
		OlderThan: c.opts.ResumeAfter, Limit: c.opts.BatchSize,
		Backoff: c.opts.Backoff, MaxBackoff: c.opts.MaxBackoff,
	})
	if err != nil {
		return res, fmt.Errorf("claim pending invoices: %w", err)
	}
	res.Claimed = len(invs)
	for _, inv := range invs {
		outcome, err := c.billing.Resume(ctx, inv.OrderID, inv.EventID)
		attrs := []any{slog.String("order_id", inv.OrderID), slog.String("key", inv.EventID.String())}
		cl := Classify(err)
		switch {
		case err == nil:
			res.Outcomes[outcome]++
			c.log.Info("pending invoice resumed", append(attrs, slog.String("outcome", string(outcome)))...)
		case errors.Is(err, ErrNotPending), cl == ClassBusy:
			// Another path has it, or had it and decided: nothing to do.
			res.Skipped++
			c.log.Debug("pending invoice skipped", append(attrs, slog.String("error", err.Error()))...)
		case errors.As(err, new(*HeldError)):
			res.Held++
			c.log.Warn("pending invoice held for a person", append(attrs, slog.String("error", err.Error()))...)
		case cl == ClassOutage, cl == ClassCanceled:
			res.Stopped = err
			return res, nil
		default:
			res.Failed++
			c.log.Warn("pending invoice not settled", append(attrs, slog.String("class", cl.String()), slog.String("error", err.Error()))...)
		}
		if ctx.Err() != nil {
			res.Stopped = ctx.Err()
			return res, nil
		}
	}
	return res, nil
}
