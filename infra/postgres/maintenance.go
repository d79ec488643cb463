package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/internal/metrics"
)

// dedupLockKey is the pg_try_advisory_xact_lock key that lets one process
// at a time maintain processed_event's partitions ("billdedp" in ASCII;
// distinct from migrateLockKey).
const dedupLockKey int64 = 0x62696c6c_64656470

// Defaults of DedupOptions.
const (
	DefaultDedupAhead       = 3
	DefaultDedupPassTimeout = time.Minute
	DefaultDedupBatchSize   = 10_000
	DefaultDedupLockTimeout = 5 * time.Second
)

// passGrace is how long past PassTimeout the client waits for the server to
// end a pass's statement before cutting the connection.
const passGrace = 5 * time.Second

// DedupOptions configures a DedupMaintenance. Only Retention is required.
type DedupOptions struct {
	// Retention is BILLING_DEDUP_RETENTION: a row is removed only once its
	// processed_at is older than this; a day partition goes only when, in
	// addition, its whole day of event ids is.
	Retention time.Duration
	// Ahead is how many UTC days after today get a partition before they
	// start (DefaultDedupAhead when 0). Yesterday and today always get one.
	Ahead int
	// PassTimeout bounds one pass (DefaultDedupPassTimeout when 0).
	PassTimeout time.Duration
	// BatchSize is how many DEFAULT-partition rows one DELETE removes
	// (DefaultDedupBatchSize when 0).
	BatchSize int
	// LockTimeout bounds each wait for a table lock (DefaultDedupLockTimeout
	// when 0). Inserts into processed_event queue behind a waiting DROP or
	// ATTACH, so this is also the longest maintenance may hold up billing.
	LockTimeout time.Duration
	// Now is the clock (time.Now when nil); tests turn it.
	Now func() time.Time
	// Metrics receives billing_dedup_partitions,
	// billing_dedup_rows_deleted_total and the maintenance run metrics; nil
	// records none.
	Metrics *metrics.Maintenance
}

// DedupResult is what one pass did.
type DedupResult struct {
	// Skipped: another process held the maintenance lock; nothing was done.
	Skipped bool
	// Created lists the day partitions created.
	Created []string
	// Moved counts rows moved out of DEFAULT into the created partitions.
	Moved int64
	// Dropped lists the expired partitions dropped, RowsDropped their rows.
	Dropped     []string
	RowsDropped int64
	// Kept lists partitions past the retention by their bounds but holding
	// a row processed within it (an old event replayed); a later pass drops
	// them.
	Kept []string
	// RowsDeleted counts DEFAULT-partition rows deleted by age.
	RowsDeleted int64
	// Partitions is the number of range partitions after the pass (DEFAULT
	// not counted): billing_dedup_partitions.
	Partitions int
}

// DedupMaintenance keeps processed_event's retention (docs/interface.md §2, §7):
// each pass creates the day partitions from yesterday to Ahead days on,
// drops the day partitions whose every event is older than the retention,
// and deletes expired rows of the DEFAULT partition in batches. One process
// at a time works (a transaction-scoped Postgres advisory lock in each
// step's transaction, so it holds behind a pooler in transaction mode); a
// pass that finds another at work skips the rest of its own.
// Pass runs one; internal/service/maintainer runs passes in the background.
//
// A dedup row older than the retention may be gone: a replay beyond it is
// caught by the invoice guard and counted as duplicate_order (docs/design.md, "Three lines of defence").
type DedupMaintenance struct {
	pool *pgxpool.Pool
	opts DedupOptions
}

// NewDedupMaintenance returns the maintenance of processed_event using pool;
// it does nothing until Pass.
func NewDedupMaintenance(pool *pgxpool.Pool, opts DedupOptions) (*DedupMaintenance, error) {
	if opts.Retention <= 0 {
		return nil, fmt.Errorf("dedup maintenance: retention %v, want > 0", opts.Retention)
	}
	if opts.Ahead < 0 || opts.PassTimeout < 0 || opts.BatchSize < 0 || opts.LockTimeout < 0 {
		return nil, errors.New("dedup maintenance: negative option")
	}
	if opts.Ahead == 0 {
		opts.Ahead = DefaultDedupAhead
	}
	if opts.PassTimeout == 0 {
		opts.PassTimeout = DefaultDedupPassTimeout
	}
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultDedupBatchSize
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultDedupLockTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &DedupMaintenance{pool: pool, opts: opts}, nil
}

// Pass runs one pass within PassTimeout and records it in the metrics
// (runs by result, last success, partitions, rows deleted). It returns
// Skipped without error when another process holds the maintenance lock.
// After an error the result still tells what was done before it.
func (m *DedupMaintenance) Pass(ctx context.Context) (DedupResult, error) {
	res, err := m.pass(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			m.opts.Metrics.Failed()
		}
	case res.Skipped:
		// Another process does this pass's work: this one completed its
		// part (billing_dedup_maintenance_last_success_timestamp_seconds
		// says when the work itself was last done).
		m.opts.Metrics.Skipped()
	default:
		m.opts.Metrics.Done(m.opts.Now())
	}
	if err != nil {
		return res, fmt.Errorf("dedup maintenance: %w", translate(ctx, err))
	}
	return res, nil
}

// pass runs the three jobs of a pass in order, each in transactions of
// its own on one connection: createAhead, dropExpired, expireDefault. A job
// that finds another process at work ends the pass as skipped; one that
// runs out of time ends it with what was done so far. Then it counts the
// partitions.
func (m *DedupMaintenance) pass(ctx context.Context) (DedupResult, error) {
	// The server enforces PassTimeout (see session); the client waits a
	// little longer for it, and cuts the connection only if the server
	// does not answer.
	deadline := time.Now().Add(m.opts.PassTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(passGrace))
	defer cancel()

	pconn, err := m.pool.Acquire(ctx)
	if err != nil {
		return DedupResult{}, fmt.Errorf("acquire: %w", err)
	}
	defer pconn.Release()
	conn := pconn.Conn()
	// Each step's transaction takes the maintenance lock for itself
	// (session.begin); a step that finds another process's step holding it
	// ends the pass as skipped. Look first, in a statement of its own (the
	// lock goes with its implicit transaction): a pass that starts while
	// another works skips before it reads the catalog, where it could queue
	// behind the other's pending table locks.
	var free bool
	if err := conn.QueryRow(ctx, stmts.dedupTryLock, dedupLockKey).Scan(&free); err != nil {
		return DedupResult{}, fmt.Errorf("lock: %w", err)
	}
	if !free {
		// Skipped before anything else, the partition count included:
		// reading the catalog could queue behind the working pod's
		// pending table locks. Its billing_dedup_partitions is as it
		// was; the working pod's is fresh (the dashboard takes the max).
		return DedupResult{Skipped: true}, nil
	}
	now := m.opts.Now()
	parts, err := listPartitions(ctx, conn)
	if err != nil {
		return DedupResult{}, err
	}
	p := &dedupPass{
		sess:   session{conn: conn, deadline: deadline, lockTimeout: m.opts.LockTimeout},
		now:    now,
		cutoff: now.Add(-m.opts.Retention),
		parts:  parts,
	}
	// Create first: a day that starts soon matters more than one to drop.
	for _, job := range []func(context.Context, *dedupPass) jobEnd{m.createAhead, m.dropExpired, m.expireDefault} {
		switch job(ctx, p) {
		case jobBusy:
			p.res.Skipped = true
			return p.res, p.err() // nil unless earlier steps failed
		case jobOutOfTime:
			return p.res, p.err()
		}
	}

	if parts, err = listPartitions(ctx, conn); err != nil {
		p.errs = append(p.errs, err)
	} else {
		for _, q := range parts {
			if !q.isDefault {
				p.res.Partitions++
			}
		}
		m.opts.Metrics.Partitions(p.res.Partitions)
	}
	return p.res, p.err()
}

// dedupPass is one pass in progress: its connection and limits, the
// partitions listed at its start, what its jobs did and the errors they
// met without ending the pass.
type dedupPass struct {
	sess   session
	now    time.Time
	cutoff time.Time   // rows processed before it are past the retention
	parts  []partition // as listed at the start of the pass
	res    DedupResult
	errs   []error
}

// jobEnd is how a job of a pass ended.
type jobEnd int

const (
	jobDone      jobEnd = iota // go on with the next job; its errors, if any, are in the pass's errs
	jobBusy                    // another process holds the maintenance lock: the pass is skipped
	jobOutOfTime               // the pass was cancelled or ran out of time
)

// failed records err of one step and says whether the pass may go on.
func (p *dedupPass) failed(ctx context.Context, err error) jobEnd {
	p.errs = append(p.errs, err)
	if ctx.Err() != nil || time.Now().After(p.sess.deadline) {
		return jobOutOfTime
	}
	return jobDone
}

// err is the pass's error so far (passErr).
func (p *dedupPass) err() error { return passErr(p.sess.deadline, p.errs) }

// createAhead creates the day partitions from yesterday to Ahead days
// after today that are missing, moving their rows out of DEFAULT.
func (m *DedupMaintenance) createAhead(ctx context.Context, p *dedupPass) jobEnd {
	today := utcDay(p.now)
	for d := today.AddDate(0, 0, -1); !d.After(today.AddDate(0, 0, m.opts.Ahead)); d = d.AddDate(0, 0, 1) {
		part := dayPartition(d)
		if !uuidV7Time(part.hi).After(p.cutoff) {
			continue // a retention under a day: it would be dropped at once
		}
		if slices.ContainsFunc(p.parts, func(q partition) bool { return q.overlaps(part.lo, part.hi) }) {
			continue
		}
		moved, created, err := createPartition(ctx, p.sess, part)
		if errors.Is(err, errMaintenanceBusy) {
			return jobBusy
		}
		if err != nil {
			if end := p.failed(ctx, fmt.Errorf("create partition %s: %w", part.name, err)); end != jobDone {
				return end
			}
			continue
		}
		if created {
			p.res.Created = append(p.res.Created, part.name)
			p.res.Moved += moved
		}
	}
	return jobDone
}

// dropExpired drops the day partitions past the retention. A day
// partition goes only when its upper bound is at or before the cutoff:
// every id in it is then older than the retention. The partition holding
// the cutoff itself is never dropped, nor one holding a row processed
// within the retention (Kept).
func (m *DedupMaintenance) dropExpired(ctx context.Context, p *dedupPass) jobEnd {
	for _, part := range p.parts {
		if !part.dayOwned() || uuidV7Time(part.hi).After(p.cutoff) {
			continue
		}
		dropped, rows, err := dropPartition(ctx, p.sess, part, p.cutoff)
		if errors.Is(err, errMaintenanceBusy) {
			return jobBusy
		}
		if errors.Is(err, errPartitionGone) {
			continue // another process dropped it since the list
		}
		if err != nil {
			if end := p.failed(ctx, fmt.Errorf("drop partition %s: %w", part.name, err)); end != jobDone {
				return end
			}
			continue
		}
		if !dropped {
			p.res.Kept = append(p.res.Kept, part.name)
			continue
		}
		p.res.Dropped = append(p.res.Dropped, part.name)
		p.res.RowsDropped += rows
		m.addDeleted(rows)
	}
	return jobDone
}

// expireDefault deletes, in batches, the rows of the DEFAULT partition
// processed before the cutoff: ids outside every day partition expire by
// processed_at. An error ends this job, not the pass.
func (m *DedupMaintenance) expireDefault(ctx context.Context, p *dedupPass) jobEnd {
	if !slices.ContainsFunc(p.parts, func(q partition) bool { return q.isDefault }) {
		return jobDone
	}
	for {
		n, err := deleteExpiredBatch(ctx, p.sess, p.cutoff, m.opts.BatchSize)
		p.res.RowsDeleted += n
		m.addDeleted(n)
		if errors.Is(err, errMaintenanceBusy) {
			return jobBusy
		}
		if err != nil {
			p.errs = append(p.errs, err)
			return jobDone
		}
		if n < int64(m.opts.BatchSize) {
			return jobDone
		}
	}
}

// passErr joins a pass's errors, marking them a timeout (errPassTimeout,
// which is context.DeadlineExceeded) when the pass ran out of time: the
// server then reports only a cancelled statement.
func passErr(deadline time.Time, errs []error) error {
	if len(errs) > 0 && time.Now().After(deadline) && !slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, errPassTimeout) }) {
		errs = append([]error{errPassTimeout}, errs...)
	}
	return errors.Join(errs...)
}

func (m *DedupMaintenance) addDeleted(n int64) {
	if n > 0 {
		m.opts.Metrics.RowsDeleted(n)
	}
}
