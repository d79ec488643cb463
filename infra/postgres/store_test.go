package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// insertProcessed inserts the dedup row of id in tx and reports whether it
// was new.
func insertProcessed(ctx context.Context, tx pgx.Tx, id uuid.UUID) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		pgtype.UUID{Bytes: id, Valid: true}, group)
	return tag.RowsAffected() == 1, err
}

// The in-place retry policy of Reserve and Settle (Store.retry), driven
// through the test hook postgres.Store.Retry.
func TestRetrySerializationFailure(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	id := newEventID(t)

	var attempts int
	err := store.Retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			attempts++
			first, err := insertProcessed(ctx, tx, id)
			if err != nil {
				return err
			}
			if !first {
				return fmt.Errorf("attempt %d: the dedup row exists: the failed attempt was not rolled back", attempts)
			}
			if attempts == 1 {
				return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("Retry() error = %v, want nil after a retry", err)
	}
	if attempts != 2 {
		t.Errorf("attempts = %d, want 2", attempts)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 1 {
		t.Errorf("ProcessedCount() = %d, %v, want 1, nil", n, err)
	}
}

func TestRetryGivesUpAfterAttempts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)

	var attempts int
	err := store.Retry(ctx, func(ctx context.Context) error {
		attempts++
		return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
	})
	if attempts != postgres.TxAttempts {
		t.Errorf("attempts = %d, want %d", attempts, postgres.TxAttempts)
	}
	var te *order.TransientError
	if !errors.As(err, &te) {
		t.Fatalf("Retry() error = %v (%T), want a *order.TransientError", err, err)
	}
	if got := order.Classify(err); got != order.ClassTransient {
		t.Errorf("Classify() = %v, want transient", got)
	}
}

func TestRetryNotOtherErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	id := newEventID(t)
	errDomain := errors.New("domain rule broken")

	var attempts int
	err := store.Retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			attempts++
			if _, err := insertProcessed(ctx, tx, id); err != nil {
				return err
			}
			return errDomain
		})
	})
	if !errors.Is(err, errDomain) {
		t.Errorf("Retry() error = %v, want it to wrap %v", err, errDomain)
	}
	if attempts != 1 {
		t.Errorf("attempts = %d, want 1", attempts)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 0 {
		t.Errorf("ProcessedCount() = %d, %v, want 0 (rolled back), nil", n, err)
	}
}

// TestRetryRealDeadlock makes two transactions lock two invoices in
// opposite orders: Postgres aborts one with 40P01 and it runs again.
func TestRetryRealDeadlock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, dsn := pgtest.NewDB(t)
	// Detect the deadlock quickly; new sessions pick the setting up.
	if _, err := pool.Exec(ctx, "ALTER DATABASE "+dbName(t, dsn)+" SET deadlock_timeout = '50ms'"); err != nil {
		t.Fatal(err)
	}
	pool.Reset()
	store := postgres.NewStore(pool)
	for _, id := range []string{"ord-a", "ord-b"} {
		if _, err := store.Reserve(ctx, pendingInvoice(id, newEventID(t)), group, terms); err != nil {
			t.Fatal(err)
		}
	}
	forUpdate := func(ctx context.Context, tx pgx.Tx, orderID string) error {
		_, err := tx.Exec(ctx, `SELECT 1 FROM invoice WHERE order_id = $1 FOR UPDATE`, orderID)
		return err
	}

	var (
		attempts atomic.Int32
		locked   sync.WaitGroup // both hold their first lock
		wg       sync.WaitGroup
		errs     [2]error
	)
	locked.Add(2)
	lockBoth := func(i int, first, second string) {
		var once sync.Once
		errs[i] = store.Retry(ctx, func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				attempts.Add(1)
				if err := forUpdate(ctx, tx, first); err != nil {
					return err
				}
				once.Do(func() { locked.Done(); locked.Wait() })
				return forUpdate(ctx, tx, second)
			})
		})
	}
	wg.Go(func() { lockBoth(0, "ord-a", "ord-b") })
	wg.Go(func() { lockBoth(1, "ord-b", "ord-a") })
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Errorf("transaction %d: Retry() error = %v, want nil after a retry", i, err)
		}
	}
	// At least one deadlock, so at least one attempt more than the two
	// transactions. Not exactly one: row locks grant no turn, so the
	// victim's next attempt can lock its first row again before the
	// survivor, woken by the victim's abort, takes it, and the two deadlock
	// once more (seen on a loaded machine: 4 attempts).
	if got := attempts.Load(); got < 3 {
		t.Errorf("attempts = %d, want at least 3 (the deadlock victim ran again)", got)
	}
}

func TestReserveCanceled(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Reserve() error = %v, want context.Canceled", err)
	}
	if got := order.Classify(err); got != order.ClassCanceled {
		t.Errorf("Classify() = %v, want canceled", got)
	}
	// The connection went back to the pool usable, outside a transaction.
	if n, err := store.ProcessedCount(context.Background(), group); err != nil || n != 0 {
		t.Errorf("ProcessedCount() = %d, %v, want 0, nil", n, err)
	}
}

func dbName(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}
