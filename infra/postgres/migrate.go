package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/migrations"
)

// migrateLockKey is the advisory lock key that serialises migrations across
// processes ("billing" "migrate" as two ASCII words; any constant that no
// other lock of this database uses would do).
const migrateLockKey int64 = 0x62696c6c_6d696772

const createSchemaMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text        PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

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

// Migrate applies the embedded migrations that the database lacks, in name
// order, and records each in schema_migrations. Processes migrating at once
// apply each file once: each file is applied under an advisory lock, by
// whichever process takes it first; the others then find it recorded.
// Running it again is a no-op.
//
// A file is applied in one transaction together with its schema_migrations
// row, unless it starts with NoTransactionMarker: then its statements run
// one by one on a second connection, outside any transaction, while the
// first holds the lock in an open transaction, and its row is written and
// the lock released when the last statement has succeeded. If one of them
// fails, those before it stay applied and the file stays unrecorded: the
// next run repeats the whole file, so its author writes it to be repeated
// (migrations/README.md). Such a file needs a pool of at least two
// connections.
//
// The lock is transaction-scoped, never held by a session across the run,
// so Migrate is correct through a pooler in transaction mode (PgBouncer),
// which lends a different server session to each transaction; the
// statements of a no-transaction file are each a transaction of their own
// there too.
//
// A process waiting for the lock holds no snapshot while it waits: it polls
// with pg_try_advisory_xact_lock between short transactions instead of
// waiting inside pg_advisory_xact_lock. CREATE INDEX CONCURRENTLY waits for
// every transaction whose snapshot is older than its own to end, so a
// waiter inside a statement would wait for the lock's holder while the
// holder's index waited for it, on two connections where Postgres cannot
// see the cycle.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrate(ctx, pool, migrations.FS)
}

func migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS) error {
	all, err := load(fsys)
	if err != nil {
		return err
	}
	for _, m := range all {
		apply := applyInTx
		if m.outsideTx() {
			apply = applyOutsideTx
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
			if _, err := tx.Exec(ctx, createSchemaMigrations); err != nil {
				rollback(ctx, tx)
				return nil, false, fmt.Errorf("migrate: create schema_migrations: %w", translate(ctx, err))
			}
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", version).Scan(&applied); err != nil {
				rollback(ctx, tx)
				return nil, false, fmt.Errorf("migrate %s: read schema_migrations: %w", version, translate(ctx, err))
			}
			return tx, applied, nil
		}
		// Another process migrates: wait outside any transaction.
		rollback(ctx, tx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, fmt.Errorf("migrate %s: wait for the migration lock: %w", version, ctx.Err())
		case <-t.C:
		}
	}
}

// applyInTx applies m unless schema_migrations lists it, in one
// transaction under the migration lock.
func applyInTx(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	tx, applied, err := lockedTx(ctx, pool, m.version)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx) // a no-op once committed
	if applied {
		return nil
	}
	// No parameters: the simple protocol, so a file may hold several
	// statements.
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "25001" { // active_sql_transaction
			return fmt.Errorf("migrate %s: %w; a statement of it cannot run inside a transaction: make %q its first line (migrations/README.md)",
				m.version, translate(ctx, err), NoTransactionMarker)
		}
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	return record(ctx, tx, m.version)
}

// applyOutsideTx applies a no-transaction file unless schema_migrations
// lists it: its statements one at a time on a connection of their own,
// while tx holds the migration lock; then its row, in tx.
func applyOutsideTx(ctx context.Context, pool *pgxpool.Pool, m migration) error {
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
	if err := runStatements(ctx, pool, m); err != nil {
		return err
	}
	return record(ctx, tx, m.version)
}

// runStatements runs m's statements in order on one connection, each on
// its own (the simple protocol, one statement: no transaction block).
func runStatements(ctx context.Context, pool *pgxpool.Pool, m migration) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", m.version, translate(ctx, err))
	}
	defer conn.Release()
	for i, stmt := range m.statements {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("migrate %s: statement %d of %d: %w (it runs outside a transaction: the statements before it stay applied, and the next run repeats the file)",
				m.version, i+1, len(m.statements), translate(ctx, err))
		}
	}
	return nil
}

// record writes version's schema_migrations row in tx and commits.
func record(ctx context.Context, tx pgx.Tx, version string) error {
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", version); err != nil {
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
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("pending migrations: %w", translate(ctx, err))
	}
	applied := map[string]bool{}
	if exists {
		rows, _ := pool.Query(ctx, "SELECT version FROM schema_migrations")
		versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("pending migrations: %w", translate(ctx, err))
		}
		for _, v := range versions {
			applied[v] = true
		}
	}
	var pending []string
	for _, m := range all {
		if !applied[m.version] {
			pending = append(pending, m.version)
		}
	}
	return pending, nil
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
		switch {
		case c == ';':
			if code {
				out = append(out, strings.TrimSpace(sql[start:i]))
			}
			i++
			start, code = i, false
			continue
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(sql)
			}
			continue
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			end, err := blockCommentEnd(sql, i)
			if err != nil {
				return nil, err
			}
			i = end
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
			continue
		}
		code = true
		switch {
		case c == '\'':
			// E'…' takes backslash escapes; elsewhere (standard strings) a
			// backslash is a character like any other.
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !identChar(sql[i-2]))
			end, err := quotedEnd(sql, i, '\'', escapes)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '"':
			end, err := quotedEnd(sql, i, '"', false)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$' && (i == 0 || !identChar(sql[i-1])):
			tag, ok := dollarTag(sql[i:])
			if !ok {
				i++ // a parameter ($1) or a lone dollar
				continue
			}
			j := strings.Index(sql[i+len(tag):], tag)
			if j < 0 {
				return nil, fmt.Errorf("unterminated dollar-quoted string %s", tag)
			}
			i += 2*len(tag) + j
		default:
			i++
		}
	}
	if code {
		out = append(out, strings.TrimSpace(sql[start:]))
	}
	return out, nil
}

// blockCommentEnd returns the index just past the /* … */ comment at i,
// which nests as Postgres's do.
func blockCommentEnd(sql string, i int) (int, error) {
	depth := 0
	for i < len(sql) {
		switch {
		case strings.HasPrefix(sql[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(sql[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i, nil
			}
		default:
			i++
		}
	}
	return 0, errors.New("unterminated /* comment")
}

// quotedEnd returns the index just past the literal or identifier that
// opens with q at i; a doubled q stands for itself, and so does a
// backslash-escaped character when escapes is set.
func quotedEnd(sql string, i int, q byte, escapes bool) (int, error) {
	for i++; i < len(sql); i++ {
		switch {
		case escapes && sql[i] == '\\':
			i++
		case sql[i] == q && i+1 < len(sql) && sql[i+1] == q:
			i++
		case sql[i] == q:
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated %c-quoted text", q)
}

// dollarTag returns the $tag$ (or $$) that s starts with.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1], true
		case identChar(c) && (j > 1 || c < '0' || c > '9'):
		default:
			return "", false
		}
	}
	return "", false
}

// identChar reports a byte that may continue an unquoted identifier.
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
