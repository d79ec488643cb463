package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/pgtest"
)

const group = "billing-test"

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newEventID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatalf("new event id: %v", err)
	}
	return id
}

// newEventIDs returns n fresh UUIDv7 event ids.
func newEventIDs(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = newEventID(t)
	}
	return ids
}

// inTx runs fn in a pgx transaction of pool and commits it.
func inTx(ctx context.Context, t *testing.T, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(ctx, pool, fn)
}

func tryInsert(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id uuid.UUID, group string) bool {
	t.Helper()
	var first bool
	err := inTx(ctx, t, pool, func(tx pgx.Tx) error {
		var err error
		first, err = postgres.DedupRepo{}.TryInsert(ctx, tx, id, group)
		return err
	})
	if err != nil {
		t.Fatalf("TryInsert(%s, %q) error = %v", id, group, err)
	}
	return first
}

func TestDedupTryInsert(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	id := newEventID(t)

	if got := tryInsert(ctx, t, pool, id, group); !got {
		t.Errorf("first TryInsert = %v, want true", got)
	}
	if got := tryInsert(ctx, t, pool, id, group); got {
		t.Errorf("second TryInsert = %v, want false", got)
	}
	if got := tryInsert(ctx, t, pool, id, "another-group"); !got {
		t.Errorf("TryInsert for another group = %v, want true", got)
	}
	if got := tryInsert(ctx, t, pool, newEventID(t), group); !got {
		t.Errorf("TryInsert of another event = %v, want true", got)
	}
	n, err := postgres.NewStore(pool).ProcessedCount(ctx, group)
	if err != nil {
		t.Fatalf("ProcessedCount() error = %v", err)
	}
	if n != 2 {
		t.Errorf("ProcessedCount(%q) = %d, want 2", group, n)
	}
}

func TestDedupTryInsertConcurrent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	id := newEventID(t)

	const workers = 20
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]bool, workers)
		errs    = make([]error, workers)
	)
	for i := range workers {
		wg.Go(func() {
			<-start
			errs[i] = store.InTx(ctx, func(ctx context.Context, tx postgres.Tx) error {
				var err error
				results[i], err = tx.TryInsertProcessed(ctx, id, group)
				return err
			})
		})
	}
	close(start)
	wg.Wait()

	firsts := 0
	for i := range workers {
		if errs[i] != nil {
			t.Errorf("worker %d: InTx() error = %v", i, errs[i])
		}
		if results[i] {
			firsts++
		}
	}
	if firsts != 1 {
		t.Errorf("%d of %d concurrent TryInsert calls returned true, want exactly 1", firsts, workers)
	}
	if n, err := store.ProcessedCount(ctx, group); err != nil || n != 1 {
		t.Errorf("ProcessedCount() = %d, %v, want 1, nil", n, err)
	}
}

func TestInvoiceRepo(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	repo := postgres.InvoiceRepo{}
	first, second := newEventID(t), newEventID(t)
	inv := order.Invoice{OrderID: "ord-1", EventID: first, CustomerID: "cus-1", Amount: 12990, Currency: "EUR", Status: order.StatusPending}

	run := func(fn func(tx pgx.Tx) error) {
		t.Helper()
		if err := inTx(ctx, t, pool, fn); err != nil {
			t.Fatal(err)
		}
	}
	run(func(tx pgx.Tx) error {
		ok, err := repo.Insert(ctx, tx, inv)
		if err == nil && !ok {
			t.Error("first Insert = false, want true")
		}
		return err
	})
	run(func(tx pgx.Tx) error {
		other := inv
		other.EventID, other.Amount = second, 1
		ok, err := repo.Insert(ctx, tx, other)
		if err == nil && ok {
			t.Error("Insert of an invoiced order = true, want false")
		}
		return err
	})
	run(func(tx pgx.Tx) error {
		got, found, err := repo.ForUpdate(ctx, tx, "ord-1")
		if err != nil {
			return err
		}
		if !found {
			t.Fatal("ForUpdate(ord-1) found = false, want true")
		}
		if got.EventID != first || got.Amount != 12990 || got.Currency != "EUR" || got.CustomerID != "cus-1" ||
			got.Status != order.StatusPending || got.ChargeID != "" || got.CreatedAt.IsZero() {
			t.Errorf("ForUpdate(ord-1) = %+v, want the first insert (event %s, pending)", got, first)
		}
		if _, found, err := repo.ForUpdate(ctx, tx, "ord-none"); err != nil || found {
			t.Errorf("ForUpdate(ord-none) found, err = %v, %v, want false, nil", found, err)
		}
		return nil
	})

	keys := map[string]uuid.UUID{"ord-1": first, "ord-2": second, "ord-none": first}
	settle := func(orderID string, status order.InvoiceStatus, chargeID string) bool {
		t.Helper()
		var ok bool
		run(func(tx pgx.Tx) error {
			var err error
			ok, err = repo.Settle(ctx, tx, orderID, keys[orderID], status, chargeID)
			return err
		})
		return ok
	}
	if !settle("ord-1", order.StatusCharged, "ch-1") {
		t.Error("Settle(pending → charged) = false, want true")
	}
	if settle("ord-1", order.StatusDeclined, "") {
		t.Error("Settle(charged → declined) = true, want false: only a pending invoice settles")
	}
	if settle("ord-none", order.StatusCharged, "ch-x") {
		t.Error("Settle(missing order) = true, want false")
	}
	err := inTx(ctx, t, pool, func(tx pgx.Tx) error {
		_, err := repo.Settle(ctx, tx, "ord-1", first, order.StatusPending, "")
		return err
	})
	if err == nil {
		t.Error("Settle(to pending) error = nil, want an error")
	}

	// A decline without a charge id stores NULL.
	run(func(tx pgx.Tx) error {
		_, err := repo.Insert(ctx, tx, order.Invoice{OrderID: "ord-2", EventID: second, CustomerID: "cus-2", Amount: 5, Currency: "USD", Status: order.StatusPending})
		return err
	})
	if !settle("ord-2", order.StatusDeclined, "") {
		t.Error("Settle(pending → declined) = false, want true")
	}
	var nullCharge bool
	if err := pool.QueryRow(ctx, "SELECT charge_id IS NULL FROM invoice WHERE order_id = 'ord-2'").Scan(&nullCharge); err != nil {
		t.Fatal(err)
	}
	if !nullCharge {
		t.Error("charge_id of a decline without charge id is not NULL")
	}

	invs, err := postgres.NewStore(pool).Invoices(ctx)
	if err != nil {
		t.Fatalf("Invoices() error = %v", err)
	}
	if len(invs) != 2 || invs[0].OrderID != "ord-1" || invs[1].OrderID != "ord-2" {
		t.Fatalf("Invoices() = %+v, want ord-1 and ord-2 in order", invs)
	}
	if invs[0].Status != order.StatusCharged || invs[0].ChargeID != "ch-1" || invs[0].EventID != first {
		t.Errorf("ord-1 = %+v, want charged ch-1 under event %s", invs[0], first)
	}
	if invs[1].Status != order.StatusDeclined || invs[1].ChargeID != "" {
		t.Errorf("ord-2 = %+v, want declined without charge id", invs[1])
	}
}

func TestInvoiceRejectsInvalidRows(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	for _, inv := range []order.Invoice{
		{OrderID: "ord-zero", EventID: newEventID(t), CustomerID: "c", Amount: 0, Currency: "EUR", Status: order.StatusPending},
		{OrderID: "ord-status", EventID: newEventID(t), CustomerID: "c", Amount: 1, Currency: "EUR", Status: "refunded"},
	} {
		err := store.InTx(ctx, func(ctx context.Context, tx postgres.Tx) error {
			_, err := tx.InsertInvoice(ctx, inv)
			return err
		})
		if err == nil {
			t.Errorf("InsertInvoice(%+v) error = nil, want a check violation", inv)
			continue
		}
		if got := order.Classify(err); got != order.ClassPermanent {
			t.Errorf("Classify(%v) = %v, want permanent", err, got)
		}
	}
}
