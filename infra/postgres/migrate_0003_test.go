package postgres_test

import (
	"strings"
	"testing"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/pgtest"
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
	if err != nil || len(pending) != 1 || !strings.HasPrefix(pending[0], "0003_") {
		t.Errorf("Pending() = %v, %v, want only 0003 left", pending, err)
	}

	if _, err := pool.Exec(ctx, `UPDATE invoice SET event_id = '01934b4e-0000-7000-8000-000000000002' WHERE order_id = 'ord-b'`); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate() after the fix error = %v", err)
	}
}
