package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres/queries"
	"github.com/acme/billing/internal/service"
	buildinfo "github.com/acme/billing/internal/version"
	"github.com/acme/billing/migrations"
)

// migrateLockKey is the advisory lock key that serialises migrations across
// processes ("billing" "migrate" as two ASCII words; any constant that no
// other lock of this database uses would do).
const migrateLockKey int64 = 0x62696c6c_6d696772

// schema_migrations lists the migrations applied, each with the release
// whose migrator applied it (NULL: a release before 1.2.0, which did not
// say): what the database held before a release's migrations ran is what
// `billing version` and `billing migrate` judge a rollback by.
const (
	createSchemaMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    release    text        NULL
)`
	// addSchemaMigrationsRelease gives the table of an older migrator the
	// column, once.
	addSchemaMigrationsRelease = `DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'schema_migrations'::regclass AND attname = 'release' AND NOT attisdropped) THEN
        ALTER TABLE schema_migrations ADD COLUMN release text NULL;
    END IF;
END
$$`
)

// NoTransactionMarker, as the first line of a migration file, makes Migrate
// run the file's statements one by one outside a transaction, for the
// statements Postgres refuses inside one (CREATE INDEX CONCURRENTLY).
// migrations/README.md says how to write such a file.
const NoTransactionMarker = "-- billing:no-transaction"

// migration is one file of the set; version is its name without ".sql".
type migration struct {
	version string
	sql     string
	// statements is set for a file marked NoTransactionMarker: its
	// statements, run one at a time outside a transaction.
	statements []string
}

func (m migration) outsideTx() bool { return m.statements != nil }

// load returns the migrations of fsys (its *.sql files) in name order. It
// checks every file before any runs: a misplaced marker or a file whose
// statements cannot be split stops the run before it changes anything.
func load(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	slices.Sort(names)
	out := make([]migration, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		m := migration{version: strings.TrimSuffix(path.Base(name), ".sql"), sql: string(b)}
		first, rest, _ := strings.Cut(m.sql, "\n")
		marked := strings.TrimSpace(first) == NoTransactionMarker
		if strings.Contains(rest, strings.TrimPrefix(NoTransactionMarker, "-- ")) || (!marked && strings.Contains(first, strings.TrimPrefix(NoTransactionMarker, "-- "))) {
			return nil, fmt.Errorf("migration %s: %q must be the file's first line, alone", m.version, NoTransactionMarker)
		}
		if marked {
			if m.statements, err = splitStatements(m.sql); err != nil {
				return nil, fmt.Errorf("migration %s: %w", m.version, err)
			}
			if len(m.statements) == 0 {
				return nil, fmt.Errorf("migration %s: no statement after %q", m.version, NoTransactionMarker)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// MigrationLockTimeout is the longest lock_timeout of a migration
// statement that Postgres lets run inside a transaction (docs/interface.md
// §10: no migration statement blocks billing's reads or writes for more
// than 2 s).
// A statement that waits longer for a lock gives up, releasing its place in
// the lock queue, and the migrator tries the file again after a pause.
const MigrationLockTimeout = 2 * time.Second

// firstLockTimeout is the lock_timeout of a file's first try; each try
// after a lock conflict doubles it, up to MigrationLockTimeout. A try
// holds billing's conflicting writes for as long as it waits, so the
// first is short: billing's own transactions, the usual blockers, end in
// milliseconds, and a long transaction is waited out before the next try
// (waitOut) rather than queued behind. Only a table so busy that short
// tries keep missing it makes the tries longer.
const firstLockTimeout = 250 * time.Millisecond

// Pauses between two tries of a migration that did not get its locks: the
// first soon (the blocker is usually one of billing's short transactions),
// then no more often than lockRetryMax, which a long report outlasts
// anyway.
const (
	lockRetryMin = 250 * time.Millisecond
	lockRetryMax = 5 * time.Second
)

// blockerWatchEvery is how often a statement that is still running is
// checked for sessions blocking it, to name them in the log.
const blockerWatchEvery = 500 * time.Millisecond

// MigrateOption configures Migrate.
type MigrateOption func(*migrator)

// WithMigrateLog has Migrate log on log: each wait for a lock, naming the
// sessions that hold it, and each retry.
func WithMigrateLog(log *slog.Logger) MigrateOption {
	return func(m *migrator) { m.log = log }
}

// WithRefusal has Migrate ask refuse, before it applies anything, whether
// to go on with the database as applied describes it; a reason it returns
// ends Migrate with a *RefusedError, and nothing is applied. It is asked
// only when there is something to apply. `billing migrate` refuses a
// database whose release cannot be rolled back to after this release's
// migrations (version.RollbackRefusal) unless --allow-no-rollback.
func WithRefusal(refuse func(applied []AppliedMigration) string) MigrateOption {
	return func(m *migrator) { m.refuse = refuse }
}

// RefusedError is Migrate declining to migrate (WithRefusal): a decision
// for a person, which waiting does not change.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "migrate: refused: " + e.Reason }

// migrator applies a migration set under the lock discipline of
// migrations/README.md.
type migrator struct {
	refuse       func(applied []AppliedMigration) string
	log          *slog.Logger
	lockTimeout  time.Duration // the longest lock_timeout of a try
	firstTimeout time.Duration // the lock_timeout of a file's first try
	// tryTimeout is the lock_timeout of the running try: firstTimeout
	// doubled at each retry of a file, up to lockTimeout. Set by retrying.
	tryTimeout time.Duration
	retryMin   time.Duration
	retryMax   time.Duration
	watchEvery time.Duration
}

func newMigrator(opts []MigrateOption) *migrator {
	m := &migrator{log: slog.New(slog.DiscardHandler), lockTimeout: MigrationLockTimeout,
		firstTimeout: firstLockTimeout,
		retryMin:     lockRetryMin, retryMax: lockRetryMax, watchEvery: blockerWatchEvery}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Migrate applies the embedded migrations that the database lacks, in name
// order, and records each in schema_migrations. Processes migrating at once
// apply each file once: each file is applied under an advisory lock, by
// whichever process takes it first; the others then find it recorded.
// Running it again is a no-op.
//
// A file is applied in one transaction together with its schema_migrations
// row, unless it starts with NoTransactionMarker: then its statements run
// one by one on a second connection, outside the lock's transaction, while
// the first holds the lock in an open transaction, and its row is written and
// the lock released when the last statement has succeeded. If one of them
// fails, those before it stay applied and the file stays unrecorded: the
// next run repeats the whole file, so its author writes it to be repeated
// (migrations/README.md). Such a file needs a pool of at least two
// connections; a third lets Migrate name the sessions a statement waits for.
//
// Migrations never stall billing (docs/interface.md §10, migrations/README.md):
// every statement runs with lock_timeout MigrationLockTimeout, in the file's
// transaction or, in a no-transaction file, in a transaction of its own;
// only the statements Postgres refuses inside a transaction (CREATE INDEX
// CONCURRENTLY and its kin, which take no lock that blocks reads or writes)
// run bare. A statement that waits longer, or that Postgres picks as a
// deadlock's victim, is not an error: the file is tried again from its
// start after a pause that grows to lockRetryMax, for as long as ctx lasts,
// and each wait is logged with the sessions that held the lock.
//
// The lock is transaction-scoped, never held by a session across the run,
// so Migrate is correct through a pooler in transaction mode (PgBouncer),
// which lends a different server session to each transaction; the
// statements of a no-transaction file are each a transaction of their own
// there too, their lock_timeout set LOCAL to it.
//
// A process waiting for the lock holds no snapshot while it waits: it polls
// with pg_try_advisory_xact_lock between short transactions instead of
// waiting inside pg_advisory_xact_lock. CREATE INDEX CONCURRENTLY waits for
// every transaction whose snapshot is older than its own to end, so a
// waiter inside a statement would wait for the lock's holder while the
// holder's index waited for it, on two connections where Postgres cannot
// see the cycle.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...MigrateOption) error {
	return newMigrator(opts).migrate(ctx, pool, migrations.FS)
}

// MigratePoolSize is the pool MigrateURL opens: a no-transaction file
// takes two connections (the lock's holder and its statements), and a
// third names, in the log, the sessions a statement waits for.
const MigratePoolSize = 3

// MigrateURL is Migrate on a pool of MigratePoolSize connections of its
// own to dsn, closed when it returns: `billing migrate`, and `billing run`
// with BILLING_MIGRATE_ON_START, whose own pool may be of one connection.
func MigrateURL(ctx context.Context, dsn string, opts ...MigrateOption) error {
	pool, err := NewPool(ctx, dsn, MigratePoolSize)
	if err != nil {
		return err
	}
	defer pool.Close()
	return Migrate(ctx, pool, opts...)
}

func (mg *migrator) migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) error {
	all, err := load(fsys)
	if err != nil {
		return err
	}
	if mg.refuse != nil {
		applied, err := Applied(ctx, pool)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		pending := slices.ContainsFunc(all, func(m migration) bool {
			return !slices.ContainsFunc(applied, func(a AppliedMigration) bool { return a.Version == m.version })
		})
		if why := mg.refuse(applied); pending && why != "" {
			return &RefusedError{Reason: why}
		}
	}
	for _, m := range all {
		apply := mg.applyInTx
		if m.outsideTx() {
			apply = mg.applyOutsideTx
		}
		if err := apply(ctx, pool, m); err != nil {
			return err
		}
	}
	return nil
}

// Polling for the migration lock: the first retry soon (the holder usually
// applies one small file), then no more often than migrateLockPollMax,
// since a concurrent index build can hold it for minutes.
const (
	migrateLockPollMin = 50 * time.Millisecond
	migrateLockPollMax = time.Second
)

// lockedTx begins a transaction that holds the migration lock, and makes
// sure schema_migrations exists. It reports whether version is already
// recorded there; the caller then has nothing to do but roll back.
func lockedTx(ctx context.Context, pool *pgxpool.Pool, version string) (tx pgx.Tx, applied bool, err error) {
	for wait := migrateLockPollMin; ; wait = min(2*wait, migrateLockPollMax) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("migrate %s: begin: %w", version, translate(ctx, err))
		}
		var locked bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", migrateLockKey).Scan(&locked); err != nil {
			rollback(ctx, tx)
			return nil, false, fmt.Errorf("migrate %s: lock: %w", version, translate(ctx, err))
		}
		if locked {
			for _, stmt := range []string{createSchemaMigrations, addSchemaMigrationsRelease} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					rollback(ctx, tx)
					return nil, false, fmt.Errorf("migrate: create schema_migrations: %w", translate(ctx, err))
				}
			}
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", version).Scan(&applied); err != nil {
				rollback(ctx, tx)
				return nil, false, fmt.Errorf("migrate %s: read schema_migrations: %w", version, translate(ctx, err))
			}
			return tx, applied, nil
		}
		// Another process migrates: wait outside any transaction.
		rollback(ctx, tx)
		if !service.Sleep(ctx, wait) {
			return nil, false, fmt.Errorf("migrate %s: wait for the migration lock: %w", version, ctx.Err())
		}
	}
}

// errLocked marks a try of a migration that did not get its locks: a
// statement's lock_timeout expired, or Postgres chose it as a deadlock's
// victim. The file is tried again.
type errLocked struct {
	err      error
	blockers []blocker // the sessions last seen holding what it waited for
}

func (e *errLocked) Error() string { return e.err.Error() }
func (e *errLocked) Unwrap() error { return e.err }

// lockConflict reports whether err is a lock timeout (55P03) or a
// deadlock (40P01): a conflict with other sessions that waiting resolves.
func lockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}

// retrying runs try until it succeeds, fails otherwise than by a lock
// conflict (*errLocked), or ctx ends, pausing between tries and logging
// each wait.
func (mg *migrator) retrying(ctx context.Context, pool *pgxpool.Pool, version string, try func() error) error {
	pause := mg.retryMin
	for n, timeout := 1, min(mg.firstTimeout, mg.lockTimeout); ; n, timeout = n+1, min(2*timeout, mg.lockTimeout) {
		mg.tryTimeout = timeout
		err := try()
		var locked *errLocked
		if !errors.As(err, &locked) {
			return err
		}
		wait := time.Duration(float64(pause) * (0.5 + rand.Float64()))
		mg.log.Warn("migration did not get its locks: it gave them up and tries again",
			slog.String("migration", version), slog.Int("try", n), slog.Duration("retry_in", wait),
			slog.String("error", locked.err.Error()), slog.Any("blocked_by", locked.blockers))
		if !service.Sleep(ctx, wait) {
			return fmt.Errorf("migrate %s: waiting to try again after %w: %w", version, locked.err, ctx.Err())
		}
		pause = min(2*pause, mg.retryMax)
		// Each try queues billing's writes behind it for up to its
		// lock_timeout: trying again while the transaction that made it
		// give up still runs (a long report) would stall billing once per
		// try, for as long as that transaction lasts. Wait for it to end
		// first, outside the queue.
		if err := mg.waitOut(ctx, pool, version, locked.blockers); err != nil {
			return fmt.Errorf("migrate %s: waiting for the transactions that held its locks after %w: %w", version, locked.err, err)
		}
	}
}

// sqlStillRunning counts the transactions of $1 (pids) and $2 (their
// xact_start) that have not ended: a pid whose xact_start changed runs
// another transaction, which did not block the try.
const sqlStillRunning = `SELECT count(*) FROM unnest($1::int4[], $2::timestamptz[]) AS b(pid, xact_start)
	JOIN pg_stat_activity a ON a.pid = b.pid AND a.xact_start = b.xact_start`

// waitOut waits, polling every watchEvery, until none of the transactions
// of blockers runs any more, logging once when it has to wait. Blockers
// whose transaction the watcher did not see start are not waited for.
func (mg *migrator) waitOut(ctx context.Context, pool *pgxpool.Pool, version string, blockers []blocker) error {
	var pids []int32
	var starts []time.Time
	for _, b := range blockers {
		if b.xactStart != nil {
			pids, starts = append(pids, b.PID), append(starts, *b.xactStart)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	for logged := false; ; logged = true {
		var n int
		if err := pool.QueryRow(ctx, sqlStillRunning, pids, starts).Scan(&n); err != nil {
			return translate(ctx, err)
		}
		if n == 0 {
			return nil
		}
		if !logged {
			mg.log.Warn("migration waits for the transactions that held its locks to end before it tries again",
				slog.String("migration", version), slog.Any("blocked_by", blockers))
		}
		if !service.Sleep(ctx, mg.watchEvery) {
			return ctx.Err()
		}
	}
}

// applyInTx applies m unless schema_migrations lists it, in one
// transaction under the migration lock, with its statements under
// lock_timeout; after a lock conflict, again.
func (mg *migrator) applyInTx(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	return mg.retrying(ctx, pool, m.version, func() error { return mg.applyInTxOnce(ctx, pool, m) })
}

func (mg *migrator) applyInTxOnce(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	tx, applied, err := lockedTx(ctx, pool, m.version)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx) // a no-op once committed
	if applied {
		return nil
	}
	pid, err := mg.limitLocks(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	// No parameters: the simple protocol, so a file may hold several
	// statements.
	_, err = mg.watched(ctx, pool, m.version, pid, func() (pgconn.CommandTag, error) { return tx.Exec(ctx, m.sql) })
	if err != nil {
		var (
			pgErr  *pgconn.PgError
			locked *errLocked
		)
		switch {
		case errors.As(err, &locked):
			return err
		case errors.As(err, &pgErr) && pgErr.Code == "25001": // active_sql_transaction
			return fmt.Errorf("migrate %s: %w; a statement of it cannot run inside a transaction: make %q its first line (migrations/README.md)",
				m.version, translate(ctx, err), NoTransactionMarker)
		}
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	return record(ctx, tx, m.version)
}

// limitLocks sets the lock_timeout of tx's statements and returns the
// server process that runs them (behind a pooler, the client's idea of it
// is the pooler's).
func (mg *migrator) limitLocks(ctx context.Context, tx pgx.Tx) (pid int32, err error) {
	err = tx.QueryRow(ctx, "SELECT pg_backend_pid(), set_config('lock_timeout', $1, true)",
		fmt.Sprintf("%dms", mg.tryTimeout.Milliseconds())).Scan(&pid, nil)
	return pid, err
}

// applyOutsideTx applies a no-transaction file unless schema_migrations
// lists it: its statements one at a time on a connection of their own,
// while tx holds the migration lock; then its row, in tx. A lock conflict
// runs the file again from its first statement (its author wrote it to be
// re-run), the migration lock held throughout.
func (mg *migrator) applyOutsideTx(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	if n := pool.Config().MaxConns; n < 2 {
		return fmt.Errorf("migrate %s: a no-transaction migration needs a pool of two connections, not %d", m.version, n)
	}
	tx, applied, err := lockedTx(ctx, pool, m.version)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if applied {
		return nil
	}
	// tx stays idle while the statements run, for as long as an index
	// build takes: the session's idle_in_transaction_session_timeout must
	// not end it (and release the lock) meanwhile.
	if _, err := tx.Exec(ctx, "SET LOCAL idle_in_transaction_session_timeout = 0"); err != nil {
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	if err := mg.retrying(ctx, pool, m.version, func() error { return mg.runStatements(ctx, pool, m) }); err != nil {
		return err
	}
	return record(ctx, tx, m.version)
}

// runStatements runs m's statements in order on one connection, each in a
// transaction of its own under lock_timeout, or, when Postgres refuses it
// inside a transaction (25001: CREATE INDEX CONCURRENTLY and the like, whose
// locks block neither reads nor writes), on its own.
func (mg *migrator) runStatements(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	defer conn.Release()
	for i, stmt := range m.statements {
		if err := mg.runStatement(ctx, pool, conn.Conn(), m.version, stmt); err != nil {
			var locked *errLocked
			if errors.As(err, &locked) {
				return err
			}
			return fmt.Errorf("migrate %s: statement %d of %d: %w (it runs outside a transaction: the statements before it stay applied, and the next run repeats the file)",
				m.version, i+1, len(m.statements), translate(ctx, err))
		}
	}
	return nil
}

func (mg *migrator) runStatement(ctx context.Context, pool *pgxpool.Pool, conn *pgx.Conn, version, stmt string) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		pid, err := mg.limitLocks(ctx, tx)
		if err != nil {
			return err
		}
		_, err = mg.watched(ctx, pool, version, pid, func() (pgconn.CommandTag, error) { return tx.Exec(ctx, stmt) })
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25001" { // active_sql_transaction
		return err
	}
	// A statement that Postgres runs only outside a transaction block. Its
	// own wait may be long (an index build waits for every older
	// snapshot), but nothing billing does waits for it: such statements
	// take SHARE UPDATE EXCLUSIVE at most, which neither reads nor writes
	// conflict with.
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return err
	}
	_, err = mg.watched(ctx, pool, version, pid, func() (pgconn.CommandTag, error) { return conn.Exec(ctx, stmt) })
	return err
}

// blocker is a session that held a lock a migration statement waited for.
type blocker struct {
	PID        int32   `json:"pid"`
	State      string  `json:"state"`
	XactAgeSec float64 `json:"xact_age_seconds"`
	App        string  `json:"application_name,omitempty"`
	Query      string  `json:"query"`

	xactStart *time.Time // its transaction's start: which transaction blocked
}

// sqlBlockers lists the sessions that block server process $1, with what
// they last ran (cut short: a report's text can be long).
const sqlBlockers = `SELECT b.pid, coalesce(b.state, ''), coalesce(extract(epoch FROM now() - b.xact_start), 0)::float8,
		coalesce(b.application_name, ''), left(coalesce(b.query, ''), 200), b.xact_start
	FROM unnest(pg_blocking_pids($1)) AS p(pid) JOIN pg_stat_activity b ON b.pid = p.pid ORDER BY b.pid`

// watched runs exec, the statement of server process pid, and meanwhile
// looks every watchEvery (at least twice a try) for the sessions blocking it, logging each new
// set as a wait. A lock conflict comes back as *errLocked, naming the last
// set seen. The look needs a connection of the pool that the statement
// does not hold; without one free it is skipped.
func (mg *migrator) watched(ctx context.Context, pool *pgxpool.Pool, version string, pid int32, exec func() (pgconn.CommandTag, error)) (pgconn.CommandTag, error) {
	wctx, cancel := context.WithCancel(ctx)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last []blocker
	)
	wg.Go(func() {
		// At least twice a try: a try that gives up names whom it waited
		// for, which the next waits out.
		every := min(mg.watchEvery, mg.tryTimeout/2)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			bs, err := mg.blockers(wctx, pool, pid, every)
			if err != nil || len(bs) == 0 {
				continue
			}
			mu.Lock()
			same := slices.EqualFunc(bs, last, func(a, b blocker) bool { return a.PID == b.PID })
			last = bs
			mu.Unlock()
			if !same {
				mg.log.Warn("migration waits for a lock", slog.String("migration", version),
					slog.Duration("gives_up_after", mg.tryTimeout), slog.Any("blocked_by", bs))
			}
		}
	})
	tag, err := exec()
	cancel()
	wg.Wait()
	if lockConflict(err) {
		mu.Lock()
		defer mu.Unlock()
		return tag, &errLocked{err: err, blockers: last}
	}
	return tag, err
}

// blockers returns the sessions blocking server process pid, on a
// connection of its own taken only if one is free at once.
func (mg *migrator) blockers(ctx context.Context, pool *pgxpool.Pool, pid int32, every time.Duration) ([]blocker, error) {
	actx, cancel := context.WithTimeout(ctx, every/2)
	defer cancel()
	conn, err := pool.Acquire(actx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	rows, _ := conn.Query(ctx, sqlBlockers, pid)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (blocker, error) {
		var b blocker
		err := row.Scan(&b.PID, &b.State, &b.XactAgeSec, &b.App, &b.Query, &b.xactStart)
		return b, err
	})
}

// record writes version's schema_migrations row in tx, naming this
// release, and commits.
func record(ctx context.Context, tx pgx.Tx, version string) error {
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, release) VALUES ($1, $2)", version, buildinfo.Release); err != nil {
		return fmt.Errorf("migrate %s: record: %w", version, translate(ctx, err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate %s: commit: %w", version, translate(ctx, err))
	}
	return nil
}

// Misconfigured returns what is wrong when err says that Postgres refused
// the connection for a reason waiting does not fix: the credentials, the
// database name, or trust in its certificate; otherwise "". Such an error
// is still an outage to TranslateError (no connection can be had), but a
// process starting up should stop and name its DSN rather than wait.
func Misconfigured(err error) string {
	var (
		pgErr   *pgconn.PgError
		certErr *tls.CertificateVerificationError
		uaErr   x509.UnknownAuthorityError
	)
	switch {
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28"):
		return fmt.Sprintf("authentication refused (SQLSTATE %s): check the user and password", pgErr.Code)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return "the database does not exist"
	case errors.As(err, &certErr), errors.As(err, &uaErr):
		return "TLS certificate not trusted: check sslmode and sslrootcert"
	}
	return ""
}

// Unreachable reports whether err (translated) means that Postgres cannot
// be reached or is not available now, which waiting may end: an outage
// that is not Misconfigured.
func Unreachable(err error) bool {
	return order.Classify(err) == order.ClassOutage && Misconfigured(err) == ""
}

// Pending returns the versions of the embedded migrations that the
// database has not applied, in order; `billing run` refuses to start unless
// it is empty.
func Pending(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	return pending(ctx, pool, migrations.FS)
}

func pending(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) ([]string, error) {
	all, err := load(fsys)
	if err != nil {
		return nil, err
	}
	applied, err := Applied(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("pending migrations: %w", err)
	}
	var pending []string
	for _, m := range all {
		if !slices.ContainsFunc(applied, func(a AppliedMigration) bool { return a.Version == m.version }) {
			pending = append(pending, m.version)
		}
	}
	return pending, nil
}

// AppliedMigration is a row of schema_migrations.
type AppliedMigration struct {
	Version string
	// Release whose migrator applied it; "" for a release before 1.2.0,
	// which did not say.
	Release string
}

// Applied returns the migrations the database records in
// schema_migrations, in order: none for a database no billing ever
// migrated. The last is the database's schema (`billing version`); it may
// name a migration this build does not know, after a rollback from a newer
// release.
func Applied(ctx context.Context, pool *pgxpool.Pool) ([]AppliedMigration, error) {
	var exists, hasRelease bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL,
		EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('schema_migrations') AND attname = 'release' AND NOT attisdropped)`).
		Scan(&exists, &hasRelease); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", translate(ctx, err))
	}
	if !exists {
		return nil, nil
	}
	q := "SELECT version, '' FROM schema_migrations ORDER BY version"
	if hasRelease {
		q = "SELECT version, coalesce(release, '') FROM schema_migrations ORDER BY version"
	}
	rows, _ := pool.Query(ctx, q)
	applied, err := pgx.CollectRows(rows, pgx.RowToStructByPos[AppliedMigration])
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", translate(ctx, err))
	}
	return applied, nil
}

// SchemaBefore is the schema a database held before the migrations of
// release ran on it: the last of applied that another release (or one that
// did not say) applied; "" if there is none.
func SchemaBefore(applied []AppliedMigration, release string) string {
	for i := len(applied) - 1; i >= 0; i-- {
		if applied[i].Release != release {
			return applied[i].Version
		}
	}
	return ""
}

// Schema is the schema this build needs: the highest of its embedded
// migrations.
func Schema() string {
	all, err := load(migrations.FS)
	if err != nil || len(all) == 0 {
		// The embedded set is checked by its own tests; a build whose
		// set does not load refuses to migrate or run anyway.
		return "unknown"
	}
	return all[len(all)-1].version
}

// splitStatements splits the text of a migration into its statements, at
// the semicolons outside string literals, quoted identifiers, dollar-quoted
// bodies and comments. A statement holding nothing but comments and blanks
// is dropped; the others keep their comments, without the semicolon.
func splitStatements(sql string) ([]string, error) {
	var (
		out   []string
		start int  // where the current statement begins
		code  bool // the current statement holds more than comments and blanks
	)
	for i := 0; i < len(sql); {
		c := sql[i]
		end, comment, ok, err := queries.Skip(sql, i)
		switch {
		case err != nil:
			return nil, err
		case ok:
			// A literal or a quoted identifier is code; a comment is not.
			code = code || !comment
			i = end
		case c == ';':
			if code {
				out = append(out, strings.TrimSpace(sql[start:i]))
			}
			i++
			start, code = i, false
		default:
			code = code || (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f')
			i++
		}
	}
	if code {
		out = append(out, strings.TrimSpace(sql[start:]))
	}
	return out, nil
}
