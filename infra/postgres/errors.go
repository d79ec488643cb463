package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/acme/billing/core/order"
)

// dependency names Postgres in OutageError.
const dependency = order.DependencyPostgres

// TranslateError maps an error from pgx or the server to billing's typed
// errors, by type and SQLSTATE, never by message text. Every error leaving
// this package goes through it:
//
//   - connection refused or lost (a *pgconn.ConnectError, a net.Error,
//     io.EOF, io.ErrUnexpectedEOF, an error pgx marks safe to retry, a
//     closed connection or pool), and SQLSTATE class 08 (connection
//     exception), class 53 (insufficient resources: disk full, out of
//     memory, too many connections), class 57 (operator intervention:
//     shutdown, crash, cannot connect now, database dropped, and 57014, a
//     statement cancelled: by a role's statement_timeout it cancels every
//     event's statements alike, so billing pauses rather than route the
//     stream through the tiers; a cancel of the caller's own is not an
//     error of Postgres, see translate),
//     class 58 (system error: I/O), class XX (internal error, corrupted
//     data or index) and 25006 (read-only transaction: we reached a standby
//     after a failover) become an *order.OutageError: Postgres as a whole
//     is unavailable or failing, and every event would fail alike;
//   - 40001 serialization_failure and 40P01 deadlock_detected (which reach
//     the caller only after Store's in-place retries) and 55P03
//     lock_not_available (a lock timeout) become an *order.TransientError;
//   - context.Canceled and context.DeadlineExceeded pass through, wrapped;
//   - errors already typed as outage or transient are returned as they are;
//   - anything else is returned wrapped, and will be classified permanent.
func TranslateError(err error) error {
	if err == nil {
		return nil
	}
	var (
		oe      *order.OutageError
		te      *order.TransientError
		connErr *pgconn.ConnectError
		pgErr   *pgconn.PgError
		netErr  net.Error
	)
	switch {
	case errors.As(err, &oe), errors.As(err, &te):
		return err
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("postgres: %w", err)
	case errors.As(err, &connErr):
		// Before the SQLSTATE: a connect attempt failing with, say, an
		// authentication error still means no connection can be had, and a
		// connect_timeout (DeadlineExceeded inside) means the server does not
		// answer.
		return &order.OutageError{Dependency: dependency, Err: err}
	case errors.As(err, &pgErr):
		return translateSQLState(pgErr.Code, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("postgres: %w", err)
	case errors.As(err, &netErr),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, puddle.ErrClosedPool),
		pgconn.SafeToRetry(err):
		return &order.OutageError{Dependency: dependency, Err: err}
	}
	return fmt.Errorf("postgres: %w", err)
}

func translateSQLState(code string, err error) error {
	class := ""
	if len(code) == 5 {
		class = code[:2]
	}
	switch {
	case code == "40001", // serialization_failure
		code == "40P01", // deadlock_detected
		code == "55P03": // lock_not_available: a lock timeout, this statement's own
		return &order.TransientError{Op: string(dependency), Err: err}
	case class == "08", // connection_exception
		class == "53",   // insufficient_resources: disk full, out of memory, too many connections
		class == "57",   // operator_intervention: shutdown, crash, cannot connect now, a statement_timeout
		class == "58",   // system_error: I/O error, undefined file
		class == "XX",   // internal_error, data_corrupted, index_corrupted
		code == "25006": // read_only_sql_transaction
		return &order.OutageError{Dependency: dependency, Err: err}
	}
	return fmt.Errorf("postgres: %w", err)
}

// translate is TranslateError for a call made with ctx: once the caller's
// ctx has ended, an error caused by that end is the caller's cancellation or
// deadline and passes through, not a sign of an outage. (pgxpool reports a
// connection attempt cut short by the caller's ctx as the bare ctx error, so
// a server that hangs is an outage only when the pool's own connect timeout
// expires first; NewPool sets one.)
func translate(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && (errors.Is(err, cerr) || queryCanceled(err)) {
		// A statement cancelled because the caller left is the caller's
		// end, whichever way pgx reports it.
		return fmt.Errorf("postgres: %w (%w)", cerr, err)
	}
	return TranslateError(err)
}

// queryCanceled reports whether err is the server's 57014, a statement
// cancelled.
func queryCanceled(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "57014"
}

// retryableInPlace reports whether the whole transaction may simply run
// again: the server rolled it back to resolve a conflict with another one.
func retryableInPlace(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return (ok && (pgErr.Code == "40001" || pgErr.Code == "40P01")) ||
		isDefaultPartitionRace(err) // the day's partition was attached meanwhile: a retry lands there
}
