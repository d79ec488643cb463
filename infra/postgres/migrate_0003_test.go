package postgres_test

import (
	"strings"
	"testing"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestMigrate0003RefusesSharedKeys: invoices that the reused-id bug wrote
// under one event_id stop migration 0003 with a message that says what to
// do, rather than a bare unique-index failure; nothing is half applied.
func TestMigrate0003RefusesSharedKeys(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	applyFoundation(ctx, t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status) VALUES
		('ord-a', '01934b4e-0000-7000-8000-000000000001', 'cus-a', 100, 'EUR', 'charged'),
		('ord-b', '01934b4e-0000-7000-8000-000000000001', 'cus-b', 500, 'EUR', 'pending')`); err != nil {
		t.Fatal(err)
	}
	err := postgres.Migrate(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "2 invoices share event_id 01934b4e-0000-7000-8000-000000000001") {
		t.Fatalf("Migrate() error = %v, want the shared event_id named", err)
	}
	pending, err := postgres.Pending(ctx, pool)
	if err != nil || len(pending) == 0 || !strings.HasPrefix(pending[0], "0003_") {
		t.Errorf("Pending() = %v, %v, want 0003 and the later ones left", pending, err)
	}

	if _, err := pool.Exec(ctx, `UPDATE invoice SET event_id = '01934b4e-0000-7000-8000-000000000002' WHERE order_id = 'ord-b'`); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate() after the fix error = %v", err)
	}
}

// TestPreviousReleaseAfter0003: the previous release's statements, which
// keep running while 0003 rolls out, still work on the new schema, and its
// one buggy write (an invoice under a key another order holds) now fails
// instead of opening a second invoice under that key.
func TestPreviousReleaseAfter0003(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	const (
		insertInvoice = `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, charge_id)
			VALUES ($1, $2, 'cus', 100, 'EUR', 'pending', NULLIF('', '')) ON CONFLICT (order_id) DO NOTHING`
		settle = `UPDATE invoice SET status = 'charged', charge_id = 'ch', updated_at = now() WHERE order_id = $1 AND status = 'pending'`
	)
	id := newEventID(t)
	if _, err := pool.Exec(ctx, insertInvoice, "ord-a", id); err != nil {
		t.Fatalf("previous release's invoice insert: %v", err)
	}
	if tag, err := pool.Exec(ctx, settle, "ord-a"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("previous release's settle = %v, %v, want 1 row", tag, err)
	}
	if _, err := pool.Exec(ctx, insertInvoice, "ord-b", id); err == nil {
		t.Error("previous release's invoice for another order under a used key: no error, want a unique violation")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoice`).Scan(&n); err != nil || n != 1 {
		t.Errorf("invoices = %d, %v, want 1", n, err)
	}
}
