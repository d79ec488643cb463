package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
)

const (
	// txAttempts is how many times InTx runs a transaction that the server
	// rolled back for a serialization failure or deadlock, before giving up
	// with a TransientError (the event then goes to a retry tier).
	txAttempts = 3
	// txBackoff is the base of the jittered pause between attempts: long
	// enough for the conflicting transaction to finish, short next to an
	// event's handling time.
	txBackoff = 20 * time.Millisecond
	// rollbackTimeout bounds a rollback made after ctx ended.
	rollbackTimeout = 5 * time.Second
)

// Store runs billing's transactions against a pool.
type Store struct {
	pool     *pgxpool.Pool
	dedup    DedupRepo
	invoices InvoiceRepo
}

var _ order.Transactor = (*Store)(nil)

// NewStore returns a Store using pool; the caller keeps owning the pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// InTx runs fn in one transaction (read committed), committing when fn
// returns nil and rolling back otherwise. When the server aborts the
// transaction with a serialization failure (40001) or a deadlock (40P01),
// from fn or from the commit, InTx runs fn again, up to txAttempts times in
// all with a short jittered pause, as long as ctx lasts; fn must therefore
// act only through tx. The returned error is translated (TranslateError).
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx order.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.runTx(ctx, fn)
		if err == nil {
			return nil
		}
		if !retryableInPlace(err) || attempt == txAttempts || ctx.Err() != nil {
			return translate(ctx, err)
		}
		pause := time.Duration(float64(txBackoff<<(attempt-1)) * (0.5 + rand.Float64()))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("postgres: retry transaction: %w (after %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// runTx is one attempt of InTx; errors are not yet translated.
func (s *Store) runTx(ctx context.Context, fn func(ctx context.Context, tx order.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(ctx, pgTx{tx: tx, dedup: s.dedup, invoices: s.invoices}); err != nil {
		rollback(ctx, tx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		// A failed commit has already rolled back (or lost the connection).
		return fmt.Errorf("commit: %w", err)
	}
	return nil
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

// pgTx is order.Tx over one pgx transaction.
type pgTx struct {
	tx       pgx.Tx
	dedup    DedupRepo
	invoices InvoiceRepo
}

var _ order.Tx = pgTx{}

func (t pgTx) TryInsertProcessed(ctx context.Context, eventID uuid.UUID, group string) (bool, error) {
	return t.dedup.TryInsert(ctx, t.tx, eventID, group)
}

func (t pgTx) InsertInvoice(ctx context.Context, inv order.Invoice) (bool, error) {
	return t.invoices.Insert(ctx, t.tx, inv)
}

func (t pgTx) InvoiceForUpdate(ctx context.Context, orderID string) (order.Invoice, bool, error) {
	return t.invoices.ForUpdate(ctx, t.tx, orderID)
}

func (t pgTx) SettleInvoice(ctx context.Context, orderID string, status order.InvoiceStatus, chargeID string) (bool, error) {
	return t.invoices.Settle(ctx, t.tx, orderID, status, chargeID)
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
