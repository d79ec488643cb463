package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TxAttempts is how many times in all retry runs a transaction that meets
// conflicts (txRuns).
const TxAttempts = txRuns

// Retry runs attempt under the conflict retries of Reserve and Settle
// and translates the result as they do, so the external tests can drive it
// with failures Reserve and Settle cannot be made to meet on demand.
func (s *Store) Retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	return translate(ctx, s.retry(ctx, attempt))
}

// The preludes of the grouped pipelines, for the external tests.
var (
	SQLReservePrelude = stmts.reservePrelude
	SQLSettlePrelude  = stmts.settlePrelude
)

// QueuedReserves and QueuedSettles count the requests waiting in the
// store's groupers for a runner, so that a test can hold them there until a
// group of the size it wants has formed.
func (s *Store) QueuedReserves() int { return s.reserves.queued() }

// QueuedSettles: see QueuedReserves.
func (s *Store) QueuedSettles() int { return s.settles.queued() }

func (g *grouper[Req, Res]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// MigrateFS and PendingFS are Migrate and Pending over the migration set
// fsys instead of the embedded one, for tests of the migrator itself.
func MigrateFS(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, opts ...MigrateOption) error {
	return newMigrator(opts).migrate(ctx, pool, fsys)
}

// WithLockRetry sets the pauses between two tries of a migration that did
// not get its locks, and how often a waiting statement is looked at, so
// that a test need not wait out the service's.
func WithLockRetry(pause, watch time.Duration) MigrateOption {
	return func(m *migrator) { m.retryMin, m.retryMax, m.watchEvery = pause, pause, watch }
}

// WithFirstLockTimeout sets the lock_timeout of a file's first try.
func WithFirstLockTimeout(d time.Duration) MigrateOption {
	return func(m *migrator) { m.firstTimeout = d }
}

// SplitStatements is the statements of a no-transaction migration file,
// as the migrator runs them one by one.
func SplitStatements(sql string) ([]string, error) { return splitStatements(sql) }

// PendingFS: see MigrateFS.
func PendingFS(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) ([]string, error) {
	return pending(ctx, pool, fsys)
}

// MigrateLockKey is the advisory lock key migrations take.
const MigrateLockKey = migrateLockKey

// WithGroups sets how many reserve groups, and as many settle groups, may
// be at the server at once (defaultGroups by default), so that a test can
// have one runner per op and see each group it sends.
func WithGroups(n int) StoreOption { return func(o *storeOptions) { o.groups = n } }

// ProcessedCount returns the number of processed_event rows of group.
func (s *Store) ProcessedCount(ctx context.Context, group string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE consumer_group = $1`, group).Scan(&n); err != nil {
		return 0, translate(ctx, fmt.Errorf("count processed events: %w", err))
	}
	return n, nil
}

// SwitchLockKey is the advisory lock key the consumption switch's
// decisions take.
const SwitchLockKey = switchLockKey
