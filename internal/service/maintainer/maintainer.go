// Package maintainer is the dedup maintainer, a background service of every
// pod: it runs the maintenance of processed_event's partitions
// (infra/postgres's DedupMaintenance: create ahead, drop expired, expire
// the DEFAULT partition; one pod at a time under an advisory lock) now and
// then every Interval, and logs what each pass did. Pass is one pass;
// Start runs passes until Stop.
package maintainer

import (
	"context"
	"log/slog"
	"time"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service"
)

// DefaultInterval is the pause between passes when Options.Interval is 0.
const DefaultInterval = time.Hour

// Maintenance is one pass of the work (postgres.DedupMaintenance): it
// records its own metrics and returns what it did, also after an error.
type Maintenance interface {
	Pass(ctx context.Context) (postgres.DedupResult, error)
}

// Options configures a Maintainer.
type Options struct {
	// Interval is the time between the starts of passes (DefaultInterval
	// when 0).
	Interval time.Duration
	// Logger receives a line per pass that changed something and per
	// failed pass; nil discards them.
	Logger *slog.Logger
}

// Maintainer runs the dedup maintenance's passes in the background.
type Maintainer struct {
	work     Maintenance
	interval time.Duration
	log      *slog.Logger
	run      service.Base
}

var _ service.Service = (*Maintainer)(nil)

// New returns a maintainer of work; it does nothing until Start or Pass.
func New(work Maintenance, opts Options) *Maintainer {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Maintainer{work: work, interval: opts.Interval, log: log.With(slog.String("component", "dedup_maintenance"))}
}

// Start runs a pass now and then one every Interval, in a goroutine, until
// ctx ends or Stop is called. It fails (service.ErrRunning) if the
// maintainer is running.
func (m *Maintainer) Start(ctx context.Context) error { return m.run.Start(ctx, m.loop) }

// Stop ends the background passes, cancelling one in progress, and waits
// for the goroutine to return. It does nothing when not started; the
// maintainer may be started again afterwards.
func (m *Maintainer) Stop() { m.run.Stop() }

func (m *Maintainer) loop(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		_, _ = m.Pass(ctx) // handled, by a log line, in Pass
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass runs one pass and logs its outcome: its error is handled here, and
// returned for tests and callers that want it.
func (m *Maintainer) Pass(ctx context.Context) (postgres.DedupResult, error) {
	start := time.Now()
	res, err := m.work.Pass(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopped mid-pass: not a failure.
	case err != nil:
		m.log.Error("dedup maintenance pass failed", slog.String("error", err.Error()),
			slog.Any("created", res.Created), slog.Any("dropped", res.Dropped), slog.Int64("rows_deleted", res.RowsDeleted))
	case res.Skipped:
		m.log.Debug("dedup maintenance pass skipped: another process holds the lock")
	default:
		level := slog.LevelDebug
		if len(res.Created)+len(res.Dropped)+len(res.Kept) > 0 || res.RowsDeleted > 0 {
			level = slog.LevelInfo
		}
		m.log.Log(ctx, level, "dedup maintenance pass",
			slog.Any("created", res.Created), slog.Int64("moved", res.Moved),
			slog.Any("dropped", res.Dropped), slog.Int64("rows_dropped", res.RowsDropped),
			slog.Any("kept", res.Kept), slog.Int64("rows_deleted", res.RowsDeleted),
			slog.Int("partitions", res.Partitions), slog.Duration("took", time.Since(start)))
	}
	return res, err
}
