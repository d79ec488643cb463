package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

type billingEnv struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	gw    *ledgertest.Gateway
	svc   *order.BillingService
}

func newBillingEnv(t *testing.T) *billingEnv {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	gw := &ledgertest.Gateway{}
	return &billingEnv{pool: pool, store: store, gw: gw, svc: order.NewBillingService(store, gw, group)}
}

// age moves the key start of every pending invoice an hour back, past the
// completer's ResumeAfter in these tests.
func (e *billingEnv) age(ctx context.Context) error {
	_, err := e.pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour' WHERE status = 'pending'`)
	return err
}

func event(t *testing.T, orderID string) order.OrderConfirmedEvent {
	t.Helper()
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: orderID, CustomerID: "cus-" + orderID, TotalAmount: 12990, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return evt
}

func (e *billingEnv) bill(ctx context.Context, t *testing.T, evt order.OrderConfirmedEvent, want order.Outcome) {
	t.Helper()
	got, err := e.svc.Bill(ctx, evt)
	if err != nil {
		t.Fatalf("Bill(%s of %s) error = %v, want outcome %s", evt.EventID, evt.OrderID, err, want)
	}
	if got != want {
		t.Errorf("Bill(%s of %s) = %s, want %s", evt.EventID, evt.OrderID, got, want)
	}
}

func (e *billingEnv) invoice(ctx context.Context, t *testing.T, orderID string) order.Invoice {
	t.Helper()
	invs, err := e.store.Invoices(ctx)
	if err != nil {
		t.Fatalf("Invoices() error = %v", err)
	}
	for _, inv := range invs {
		if inv.OrderID == orderID {
			return inv
		}
	}
	t.Fatalf("no invoice for %s in %+v", orderID, invs)
	return order.Invoice{}
}

func refused(kind order.RefusalKind, code int) error {
	return &order.PermanentError{Op: "charge", Err: &order.ChargeRefusedError{Kind: kind, StatusCode: code, Err: fmt.Errorf("gateway %d", code)}}
}
