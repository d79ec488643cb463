package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/pgtest"
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

func TestBillingSameEventTwice(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	evt := event(t, "ord-1")

	e.bill(ctx, t, evt, order.OutcomeCharged)
	e.bill(ctx, t, evt, order.OutcomeDuplicate)

	if keys := e.gw.keys(); len(keys) != 1 || keys[0] != evt.EventID {
		t.Errorf("gateway keys = %v, want one charge keyed %s", keys, evt.EventID)
	}
	inv := e.invoice(ctx, t, "ord-1")
	if inv.Status != order.StatusCharged || inv.ChargeID != "ch-1" || inv.EventID != evt.EventID || inv.Amount != 12990 {
		t.Errorf("invoice = %+v, want charged ch-1 under %s", inv, evt.EventID)
	}
	if n, err := e.store.ProcessedCount(ctx, group); err != nil || n != 1 {
		t.Errorf("ProcessedCount() = %d, %v, want 1, nil", n, err)
	}
}

func TestBillingSecondEventSameOrder(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	first, second := event(t, "ord-1"), event(t, "ord-1")

	e.bill(ctx, t, first, order.OutcomeCharged)
	e.bill(ctx, t, second, order.OutcomeDuplicateOrder)
	e.bill(ctx, t, second, order.OutcomeDuplicate)

	if keys := e.gw.keys(); len(keys) != 1 {
		t.Errorf("gateway keys = %v, want one charge", keys)
	}
	if inv := e.invoice(ctx, t, "ord-1"); inv.EventID != first.EventID || inv.Status != order.StatusCharged {
		t.Errorf("invoice = %+v, want charged under the first event %s", inv, first.EventID)
	}
	if n, err := e.store.ProcessedCount(ctx, group); err != nil || n != 2 {
		t.Errorf("ProcessedCount() = %d, %v, want 2, nil", n, err)
	}
}

// TestBillingResumesPendingWithFirstKey: the gateway fails the first charge;
// a second event for the order (a new event_id) must resume the pending
// invoice under the FIRST event's key, never charge under its own.
func TestBillingResumesPendingWithFirstKey(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	e.gw.answer = func(n int, _ order.ChargeRequest) (order.ChargeResult, error) {
		if n == 1 {
			return order.ChargeResult{}, &order.TransientError{Op: "charge", Err: errors.New("gateway 503")}
		}
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-ok"}, nil
	}
	first, second := event(t, "ord-1"), event(t, "ord-1")

	_, err := e.svc.Bill(ctx, first)
	if got := order.Classify(err); got != order.ClassTransient {
		t.Fatalf("Bill(first) error = %v (class %v), want transient", err, got)
	}
	if inv := e.invoice(ctx, t, "ord-1"); inv.Status != order.StatusPending || inv.EventID != first.EventID {
		t.Fatalf("invoice after the failed charge = %+v, want pending under %s", inv, first.EventID)
	}

	e.bill(ctx, t, second, order.OutcomeCharged)
	keys := e.gw.keys()
	if len(keys) != 2 || keys[0] != first.EventID || keys[1] != first.EventID {
		t.Errorf("gateway keys = %v, want two calls both keyed by the first event %s (second is %s)", keys, first.EventID, second.EventID)
	}
	inv := e.invoice(ctx, t, "ord-1")
	if inv.Status != order.StatusCharged || inv.ChargeID != "ch-ok" || inv.EventID != first.EventID {
		t.Errorf("invoice = %+v, want charged ch-ok under %s", inv, first.EventID)
	}

	// The first event redelivered now finds a final invoice.
	e.bill(ctx, t, first, order.OutcomeDuplicate)
	if n := len(e.gw.keys()); n != 2 {
		t.Errorf("gateway calls = %d, want still 2", n)
	}
}

func TestBillingDecline(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	e.gw.answer = func(int, order.ChargeRequest) (order.ChargeResult, error) {
		return order.ChargeResult{Status: order.ChargeDeclined}, nil
	}
	evt := event(t, "ord-1")
	e.bill(ctx, t, evt, order.OutcomeDeclined)
	e.bill(ctx, t, event(t, "ord-1"), order.OutcomeDuplicateOrder)
	if inv := e.invoice(ctx, t, "ord-1"); inv.Status != order.StatusDeclined || inv.ChargeID != "" {
		t.Errorf("invoice = %+v, want declined without charge id", inv)
	}
	if n := len(e.gw.keys()); n != 1 {
		t.Errorf("gateway calls = %d, want 1", n)
	}
}

func refused(kind order.RefusalKind, code int) error {
	return &order.PermanentError{Op: "charge", Err: &order.ChargeRefusedError{Kind: kind, StatusCode: code, Err: fmt.Errorf("gateway %d", code)}}
}

// TestBillingReusedEventIDForAnotherOrder (issue 15.1): an event that reuses
// another event's id for another order is a duplicate: no invoice for the
// second order, no charge under the first order's key.
func TestBillingReusedEventIDForAnotherOrder(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	first := event(t, "ord-a")
	reused := first
	reused.OrderID, reused.CustomerID, reused.TotalAmount = "ord-b", "cus-ord-b", 500

	e.bill(ctx, t, first, order.OutcomeCharged)
	e.bill(ctx, t, reused, order.OutcomeDuplicate)

	if keys := e.gw.keys(); len(keys) != 1 {
		t.Errorf("gateway keys = %v, want the one charge of ord-a", keys)
	}
	invs, err := e.store.Invoices(ctx)
	if err != nil || len(invs) != 1 || invs[0].OrderID != "ord-a" {
		t.Errorf("Invoices() = %+v, %v, want only ord-a's", invs, err)
	}
}

// TestBillingRejected (issue 15.2): a permanent refusal settles the invoice
// rejected (no money moved) and fails the event permanently, for the DLQ;
// the next event of the order reopens it under that event's key, amount
// and currency. A 422 instead leaves it pending under its key.
func TestBillingRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		refusal    order.RefusalKind
		next       func(first order.OrderConfirmedEvent) order.OrderConfirmedEvent
		wantStatus order.InvoiceStatus // after the first event
		wantNext   order.Outcome       // of the next event ("" = an error)
		wantKey    func(first, next order.OrderConfirmedEvent) uuid.UUID
		wantAmount func(first, next order.OrderConfirmedEvent) int64
	}{{
		name: "rejected, the same record replayed", refusal: order.RefusalRejected,
		next:       func(first order.OrderConfirmedEvent) order.OrderConfirmedEvent { return first },
		wantStatus: order.StatusRejected, wantNext: order.OutcomeCharged,
		wantKey:    func(first, _ order.OrderConfirmedEvent) uuid.UUID { return first.EventID },
		wantAmount: func(first, _ order.OrderConfirmedEvent) int64 { return first.TotalAmount },
	}, {
		name: "rejected, a corrected event", refusal: order.RefusalRejected,
		next: func(first order.OrderConfirmedEvent) order.OrderConfirmedEvent {
			evt := event(t, first.OrderID)
			evt.TotalAmount, evt.Currency = 777, "USD"
			return evt
		},
		wantStatus: order.StatusRejected, wantNext: order.OutcomeCharged,
		wantKey:    func(_, next order.OrderConfirmedEvent) uuid.UUID { return next.EventID },
		wantAmount: func(_, next order.OrderConfirmedEvent) int64 { return next.TotalAmount },
	}, {
		name: "422, a corrected event resumes the first key", refusal: order.RefusalKeyReused,
		next:       func(first order.OrderConfirmedEvent) order.OrderConfirmedEvent { return event(t, first.OrderID) },
		wantStatus: order.StatusPending, wantNext: "",
		wantKey:    func(first, _ order.OrderConfirmedEvent) uuid.UUID { return first.EventID },
		wantAmount: func(first, _ order.OrderConfirmedEvent) int64 { return first.TotalAmount },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			e := newBillingEnv(t)
			e.gw.answer = func(n int, req order.ChargeRequest) (order.ChargeResult, error) {
				if n == 1 || tt.refusal == order.RefusalKeyReused {
					return order.ChargeResult{}, refused(tt.refusal, 400)
				}
				return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-ok"}, nil
			}
			first := event(t, "ord-1")
			if _, err := e.svc.Bill(ctx, first); order.Classify(err) != order.ClassPermanent {
				t.Fatalf("Bill(first) error = %v, want a permanent error (DLQ)", err)
			}
			if inv := e.invoice(ctx, t, "ord-1"); inv.Status != tt.wantStatus || inv.EventID != first.EventID {
				t.Fatalf("invoice after the refusal = %+v, want %s under %s", inv, tt.wantStatus, first.EventID)
			}

			next := tt.next(first)
			got, err := e.svc.Bill(ctx, next)
			if tt.wantNext == "" {
				if order.Classify(err) != order.ClassPermanent {
					t.Errorf("Bill(next) = %s, %v, want a permanent error", got, err)
				}
			} else if err != nil || got != tt.wantNext {
				t.Errorf("Bill(next) = %s, %v, want %s", got, err, tt.wantNext)
			}
			keys := e.gw.keys()
			if len(keys) != 2 || keys[0] != first.EventID || keys[1] != tt.wantKey(first, next) {
				t.Errorf("gateway keys = %v, want %s then %s", keys, first.EventID, tt.wantKey(first, next))
			}
			inv := e.invoice(ctx, t, "ord-1")
			wantFinal := order.StatusCharged
			if tt.wantNext == "" {
				wantFinal = order.StatusPending
			}
			if inv.Status != wantFinal || inv.EventID != tt.wantKey(first, next) || inv.Amount != tt.wantAmount(first, next) {
				t.Errorf("invoice = %+v, want %s under %s for %d", inv, wantFinal, tt.wantKey(first, next), tt.wantAmount(first, next))
			}
		})
	}
}
