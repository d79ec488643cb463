package postgres_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// startStub runs a gateway stub and a client of it, both closed at the end.
func startStub(t *testing.T) (*gatewaystub.Stub, *httpgateway.Client) {
	t.Helper()
	stub := gatewaystub.New(gatewaystub.Options{})
	base := stub.StartTest(t)
	c, err := httpgateway.NewClient(base, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return stub, c
}

// TestPendingCompleterChargesOnce: an invoice left pending (its
// event dead-lettered after the gateway failed it; nobody replays it) is
// resumed by the completer under its recorded key; the gateway fails the
// first attempts too, the back-off spaces them, and the order ends charged
// exactly once.
func TestPendingCompleterChargesOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	stub, client := startStub(t)
	stub.SetFault(func(_ gatewaystub.Call, n int) gatewaystub.Fault {
		if n <= 3 { // the consumer's attempt, then the completer's first two
			return gatewaystub.Fault{Status: http.StatusServiceUnavailable}
		}
		return gatewaystub.Fault{}
	})
	svc := order.NewBillingService(store, client, group)
	evt := event(t, "ord-1")
	if _, err := svc.Bill(ctx, evt); order.Classify(err) != order.ClassTransient {
		t.Fatalf("Bill() error = %v, want transient (the event then goes through the tiers to the DLQ)", err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}

	var stats atomic.Value
	c := order.NewPendingCompleter(store, svc, order.CompleterOptions{
		ResumeAfter: time.Minute, Interval: 20 * time.Millisecond, PassTimeout: 200 * time.Millisecond,
		Stats: func(s order.PendingStats) { stats.Store(s) },
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	poll.Until(t, "the pending invoice charged", 20*time.Second, func() bool {
		invs, err := store.Invoices(ctx)
		return err == nil && len(invs) == 1 && invs[0].Status == order.StatusCharged
	})
	poll.Until(t, "the gauges see no pending invoice", 10*time.Second, func() bool {
		s, ok := stats.Load().(order.PendingStats)
		return ok && s.Count == 0 && s.Oldest == 0
	})
	c.Stop()

	if got := stub.ChargesForOrder("ord-1"); len(got) != 1 || got[0].Key != evt.EventID.String() {
		t.Errorf("charges of ord-1 = %+v, want one under %s", got, evt.EventID)
	}
	calls := stub.Calls()
	if len(calls) != 4 {
		t.Errorf("gateway calls = %d, want 4 (three refused, one charge)", len(calls))
	}
	for _, call := range calls {
		if call.Key != evt.EventID.String() {
			t.Errorf("call under key %s, want every call under %s", call.Key, evt.EventID)
		}
	}
	invs, err := store.Invoices(ctx)
	if err != nil || len(invs) != 1 || invs[0].ChargeID != stub.ChargesForOrder("ord-1")[0].ID {
		t.Errorf("invoices = %+v, %v, want ord-1 charged with the stub's charge id", invs, err)
	}
}

// TestPendingCompletersShareNothing: two completers passing at once over the
// same due invoices never both act on one: every key reaches the gateway
// once, and every invoice ends charged.
func TestPendingCompletersShareNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	stub, client := startStub(t)
	stub.SetLatency(5 * time.Millisecond)
	const n = 30
	for i := range n {
		if _, err := store.Reserve(ctx, pendingInvoice(fmt.Sprintf("ord-%02d", i), newEventID(t)), group, ended); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}

	svc := order.NewBillingService(store, client, group)
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results [2]order.CompleterResult
		errs    [2]error
	)
	for i := range 2 {
		c := order.NewPendingCompleter(store, svc, order.CompleterOptions{ResumeAfter: time.Minute, PassTimeout: 20 * time.Second, BatchSize: n})
		wg.Go(func() {
			<-start
			results[i], errs[i] = c.RunOnce(ctx)
		})
	}
	close(start)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Fatalf("completer %d: RunOnce() error = %v", i, err)
		}
	}
	if got := results[0].Claimed + results[1].Claimed; got != n {
		t.Errorf("claimed %d + %d, want %d in all", results[0].Claimed, results[1].Claimed, n)
	}
	perKey := map[string]int{}
	for _, call := range stub.Calls() {
		perKey[call.Key]++
	}
	for key, calls := range perKey {
		if calls != 1 {
			t.Errorf("key %s sent %d times, want once", key, calls)
		}
	}
	invs, err := store.Invoices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if inv.Status != order.StatusCharged {
			t.Errorf("invoice %s is %s, want charged", inv.OrderID, inv.Status)
		}
	}
	// Claimed once, each invoice is not due again before its back-off.
	if again, err := store.ClaimPending(ctx, order.PendingClaim{Limit: n, Backoff: time.Minute, MaxBackoff: time.Hour}); err != nil || len(again) != 0 {
		t.Errorf("ClaimPending() after the passes = %d invoices, %v, want none", len(again), err)
	}
}

// TestPendingCompleterOutcomes: what one resume does to the invoice, by the
// gateway's answer. An outage ends the pass before the next invoice.
func TestPendingCompleterOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		answer     error
		declined   bool
		wantStatus order.InvoiceStatus
		wantCalls  int // of the two invoices
	}{
		{"charged", nil, false, order.StatusCharged, 2},
		{"declined", nil, true, order.StatusDeclined, 2},
		{"4xx rejected", refused(order.RefusalRejected, 400), false, order.StatusRejected, 2},
		{"422 held", refused(order.RefusalKeyReused, 422), false, order.StatusHeld, 2},
		{"transient stays pending", &order.TransientError{Op: "charge", Err: errors.New("503")}, false, order.StatusPending, 2},
		{"outage stops the pass", &order.OutageError{Dependency: "gateway", Err: errors.New("401")}, false, order.StatusPending, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			e := newBillingEnv(t)
			e.gw.answer = func(int, order.ChargeRequest) (order.ChargeResult, error) {
				if tt.answer != nil {
					return order.ChargeResult{}, tt.answer
				}
				if tt.declined {
					return order.ChargeResult{Status: order.ChargeDeclined}, nil
				}
				return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-1"}, nil
			}
			for _, id := range []string{"ord-1", "ord-2"} {
				if _, err := e.store.Reserve(ctx, pendingInvoice(id, newEventID(t)), group, ended); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.age(ctx); err != nil {
				t.Fatal(err)
			}
			c := order.NewPendingCompleter(e.store, e.svc, order.CompleterOptions{ResumeAfter: time.Minute})
			res, err := c.RunOnce(ctx)
			if err != nil || res.Claimed != 2 {
				t.Fatalf("RunOnce() = %+v, %v, want 2 claimed", res, err)
			}
			if got := len(e.gw.keys()); got != tt.wantCalls {
				t.Errorf("gateway calls = %d, want %d", got, tt.wantCalls)
			}
			if inv := e.invoice(ctx, t, "ord-1"); inv.Status != tt.wantStatus {
				t.Errorf("invoice = %+v, want %s", inv, tt.wantStatus)
			}
			st, err := e.store.PendingStats(ctx)
			wantPending, wantHeld := 0, 0
			switch tt.wantStatus {
			case order.StatusPending:
				wantPending = 2
			case order.StatusHeld:
				wantHeld = 2
			}
			if err != nil || st.Count != wantPending || st.Held != wantHeld || (wantPending > 0 && st.Oldest < 59*time.Minute) {
				t.Errorf("PendingStats() = %+v, %v, want %d pending, the oldest about an hour, %d held", st, err, wantPending, wantHeld)
			}
			if tt.wantStatus == order.StatusHeld && res.Held != 2 {
				t.Errorf("RunOnce() = %+v, want both held", res)
			}
		})
	}
}
