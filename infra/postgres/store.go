package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
)

const (
	// rollbackTimeout bounds a rollback made after ctx ended.
	rollbackTimeout = 5 * time.Second
)

// Store runs billing's transactions against a pool: order.Ledger for the
// service (Reserve, Settle), order.PendingLedger for the pending completer,
// and reads for probes, tools and tests.
type Store struct {
	pool *pgxpool.Pool
}

var _ order.Ledger = (*Store)(nil)

// NewStore returns a Store using pool; the caller keeps owning the pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Reserve is the reserve transaction of order.Ledger in one round trip: its
// two statements (sqlReserve, then the read of the invoice FOR UPDATE) go in
// one pipeline (a pgx batch) that Postgres runs as one implicit transaction,
// committed at its Sync, rolled back whole if any statement fails. Sent one
// by one inside BEGIN … COMMIT they cost several round trips, and on a busy 2-core machine the round trips, not the rows,
// are what the service and the server spend their CPU on (`make bench`).
// A serialization failure or deadlock runs it again (retry).
func (s *Store) Reserve(ctx context.Context, inv order.Invoice, group string) (order.Reservation, error) {
	var r order.Reservation
	err := s.retry(ctx, func(ctx context.Context) error {
		r = order.Reservation{}
		b := &pgx.Batch{}
		b.Queue(sqlReserve, reserveArgs(inv, group)...).
			QueryRow(func(row pgx.Row) error { return row.Scan(&r.FirstSeen, &r.Reopened) })
		b.Queue(sqlInvoiceForUpdate, inv.OrderID).QueryRow(func(row pgx.Row) error {
			var err error
			r.Invoice, err = scanInvoice(row)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			r.Found = err == nil
			return err
		})
		return s.pool.SendBatch(ctx, b).Close()
	})
	handOff()
	if isDefaultPartitionRace(err) {
		return r, partitionRaceError(inv.EventID, err)
	}
	if err != nil {
		return r, translate(ctx, fmt.Errorf("reserve order %s event %s: %w", inv.OrderID, inv.EventID, err))
	}
	return r, nil
}

// errNotFinal rejects settling an invoice to a state that is not final.
var errNotFinal = errors.New("status is not final")

// Settle is the settle transaction of order.Ledger, one UPDATE committed on
// its own: the order's invoice moves from pending under key to status
// (charged, declined or rejected), recording chargeID (NULL when ""). It
// reports false when the invoice was already final, holds another key
// (reopened since), or does not exist.
func (s *Store) Settle(ctx context.Context, orderID string, key uuid.UUID, status order.InvoiceStatus, chargeID string) (bool, error) {
	if !status.Final() {
		return false, TranslateError(fmt.Errorf("settle invoice %s to %q: %w", orderID, status, errNotFinal))
	}
	var settled bool
	err := s.retry(ctx, func(ctx context.Context) error {
		tag, err := s.pool.Exec(ctx, sqlSettle, orderID, string(status), chargeID, pgtype.UUID{Bytes: key, Valid: true})
		settled = tag.RowsAffected() == 1
		return err
	})
	handOff()
	if err != nil {
		return false, translate(ctx, fmt.Errorf("settle invoice %s: %w", orderID, err))
	}
	return settled, nil
}

// handOff yields the processor right after a transaction has given its
// connection back to the pool, so that the goroutine waiting for that
// connection (woken by the release and queued next on this processor) sends
// its statements now. Without it the caller runs on (the gateway call, the
// next event), every goroutine it wakes on the way pushes the waiter further
// back in the run queue, and the connection sits idle in the pool meanwhile.
// `make bench` at a fast gateway with many events in flight shows it: part
// of the pool idle while events wait for a connection without the yield,
// all of it in use with it (the "DB pool (busy)" column). The cost is one
// reschedule per transaction, nothing next to its round trip.
func handOff() { runtime.Gosched() }

// retry runs one transaction attempt, and again after a serialization
// failure or deadlock (and the DEFAULT-partition race), as the retry
// policy's in-place schedule says, jittered, as long as ctx lasts. The
// returned error is not translated.
func (s *Store) retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		base, again := order.NewRetryPolicy().InPlaceDelay(n)
		if !retryableInPlace(err) || !again || ctx.Err() != nil {
			return err
		}
		pause := time.Duration(float64(base) * (0.5 + rand.Float64()))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("postgres: retry transaction: %w (after %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// rollback ends tx even when ctx has ended: a cancelled caller must not
// leave its connection inside a transaction. Its error is of no use to the
// caller, who already has the error that caused the rollback; a connection
// whose rollback fails is closed by pgx.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// Ping checks that Postgres answers, for /readyz.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", translate(ctx, err))
	}
	return nil
}

// Invoices returns every invoice ordered by order_id, for tests, the demo
// and end-to-end checks.
func (s *Store) Invoices(ctx context.Context) ([]order.Invoice, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+invoiceColumns+` FROM invoice ORDER BY order_id`)
	invs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.Invoice, error) { return scanInvoice(row) })
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("list invoices: %w", err))
	}
	return invs, nil
}

// ProcessedCount returns the number of processed_event rows of group.
func (s *Store) ProcessedCount(ctx context.Context, group string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE consumer_group = $1`, group).Scan(&n); err != nil {
		return 0, translate(ctx, fmt.Errorf("count processed events: %w", err))
	}
	return n, nil
}
