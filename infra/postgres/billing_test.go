package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// fakeGateway records charges and answers with answer (success when nil).
// Only the gateway is fake here; the database is real.
type fakeGateway struct {
	mu     sync.Mutex
	calls  []order.ChargeRequest
	answer func(n int, req order.ChargeRequest) (order.ChargeResult, error) // n counts from 1
}

var _ order.PaymentGateway = (*fakeGateway)(nil)

func (g *fakeGateway) Charge(_ context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, req)
	if g.answer != nil {
		return g.answer(len(g.calls), req)
	}
	return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: fmt.Sprintf("ch-%d", len(g.calls))}, nil
}

func (g *fakeGateway) keys() []uuid.UUID {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uuid.UUID, len(g.calls))
	for i, c := range g.calls {
		out[i] = c.IdempotencyKey
	}
	return out
}

type billingEnv struct {
	pool  *pgxpool.Pool
	store *postgres.Store
	gw    *fakeGateway
	svc   *order.BillingService
}

func newBillingEnv(t *testing.T) *billingEnv {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	gw := &fakeGateway{}
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
