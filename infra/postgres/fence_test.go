package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service/completer"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// gatedGateway passes charges to next, except that a charge under a gated
// key waits, before it is sent, until its gate opens: a request that has
// left the service and not reached the gateway yet, for as long as the
// test wants. entered says which key's charge began to wait.
type gatedGateway struct {
	next    order.PaymentGateway
	entered chan uuid.UUID

	mu    sync.Mutex
	gates map[uuid.UUID]chan struct{}
}

func newGatedGateway(next order.PaymentGateway) *gatedGateway {
	return &gatedGateway{next: next, entered: make(chan uuid.UUID, 16), gates: map[uuid.UUID]chan struct{}{}}
}

// gate makes the next charges under key wait until the returned open is
// called.
func (g *gatedGateway) gate(key uuid.UUID) (open func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.gates[key] = ch
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.gates, key)
			g.mu.Unlock()
			close(ch)
		})
	}
}

func (g *gatedGateway) Charge(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	g.mu.Lock()
	ch := g.gates[req.IdempotencyKey]
	g.mu.Unlock()
	if ch != nil {
		g.entered <- req.IdempotencyKey
		select {
		case <-ch:
		case <-ctx.Done():
			return order.ChargeResult{}, ctx.Err()
		}
	}
	return g.next.Charge(ctx, req)
}

// waitEntered waits until a charge under key waits at its gate.
func (g *gatedGateway) waitEntered(t *testing.T, key uuid.UUID) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case k := <-g.entered:
			if k == key {
				return
			}
		case <-timeout:
			t.Fatalf("no charge under %s reached its gate", key)
		}
	}
}

// refuseKey makes the stub refuse every request under key with status,
// storing nothing (as a gateway does for a request that fails validation),
// until the returned func is called.
func refuseKey(stub *gatewaystub.Stub, key uuid.UUID, status int) (stop func()) {
	var mu sync.Mutex
	on := true
	stub.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		mu.Lock()
		defer mu.Unlock()
		if on && c.Key == key.String() {
			return gatewaystub.Fault{Status: status}
		}
		return gatewaystub.Fault{}
	})
	return func() {
		mu.Lock()
		on = false
		mu.Unlock()
	}
}

// billUntilFinal bills evt as the consumer does: an event that finds another
// path's attempt in flight waits and tries again (it routes nothing); any
// other error is returned.
func billUntilFinal(ctx context.Context, t *testing.T, svc *order.BillingService, evt order.OrderConfirmedEvent) (order.Outcome, error) {
	t.Helper()
	policy := order.NewRetryPolicy()
	for attempt := 0; ; attempt++ {
		out, err := svc.Bill(ctx, evt)
		d := policy.Decide(err, 0, attempt)
		if err == nil || d.Action != order.ActionWait {
			return out, err
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(d.Delay):
		}
	}
}

// pendingAfter503 bills evt once against a stub that answers its key's
// first request with a 503, leaving the order's invoice pending under it.
func pendingAfter503(ctx context.Context, t *testing.T, stub *gatewaystub.Stub, svc *order.BillingService, evt order.OrderConfirmedEvent) {
	t.Helper()
	stop := refuseKey(stub, evt.EventID, http.StatusServiceUnavailable)
	defer stop()
	if _, err := svc.Bill(ctx, evt); order.Classify(err) != order.ClassTransient {
		t.Fatalf("Bill(%s) error = %v, want transient (503)", evt.OrderID, err)
	}
}

// chargesOf counts the gateway's charges for orderID, and fails the test
// unless there is exactly one.
func wantOneCharge(t *testing.T, stub *gatewaystub.Stub, orderID string) {
	t.Helper()
	if cs := stub.ChargesForOrder(orderID); len(cs) != 1 {
		t.Errorf("gateway charges of %s = %d (%+v), want exactly one", orderID, len(cs), cs)
	}
}

// TestCompleterNeverSendsAStaleKey: the completer
// claims invoices A and B and is slow on A; meanwhile the tier retry of B's
// event gets a 404 (the gateway stores nothing) and B is rejected; then B's
// order gets a new event (before or after the completer reaches B). The
// completer must not send B's old key: a gateway that stored nothing for
// the 404 would charge it, and the new event charges the order under its
// own key — two charges. The pass must not report B charged either.
func TestCompleterNeverSendsAStaleKey(t *testing.T) {
	t.Parallel()
	for _, newEventInWindow := range []bool{false, true} {
		name := "new event after the pass"
		if newEventInWindow {
			name = "new event inside the window"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, _ := pgtest.NewDB(t)
			store := postgres.NewStore(pool)
			stub, client := startStub(t)
			gw := newGatedGateway(client)
			svc := order.NewBillingService(store, gw, group)

			a, b := event(t, "ord-a"), event(t, "ord-b")
			pendingAfter503(ctx, t, stub, svc, a)
			pendingAfter503(ctx, t, stub, svc, b)
			// A is older than B, so the completer resumes A first.
			if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - CASE order_id WHEN 'ord-a' THEN interval '2 hours' ELSE interval '1 hour' END`); err != nil {
				t.Fatal(err)
			}

			openA := gw.gate(a.EventID)
			defer openA()
			c := completer.New(store, svc, completer.Options{ResumeAfter: time.Minute, PassTimeout: 30 * time.Second})
			type passResult struct {
				res completer.Result
				err error
			}
			pass := make(chan passResult, 1)
			go func() {
				res, err := c.Pass(ctx)
				pass <- passResult{res, err}
			}()
			gw.waitEntered(t, a.EventID)

			// B's tier retry meets a 404 while the completer is busy with A.
			stop := refuseKey(stub, b.EventID, http.StatusNotFound)
			if _, err := billUntilFinal(ctx, t, svc, b); order.Classify(err) != order.ClassPermanent {
				t.Fatalf("tier retry of B: error = %v, want permanent (404)", err)
			}
			stop()
			if inv := invoiceOf(ctx, t, store, "ord-b"); inv.Status != order.StatusRejected {
				t.Fatalf("B after the 404 = %s, want rejected", inv.Status)
			}
			b2 := event(t, "ord-b")
			if newEventInWindow {
				if out, err := billUntilFinal(ctx, t, svc, b2); err != nil || out != order.OutcomeCharged {
					t.Fatalf("new event of B = %s, %v, want charged under its own key", out, err)
				}
			}

			openA()
			var p passResult
			select {
			case p = <-pass:
			case <-ctx.Done():
				t.Fatal("the completer's pass did not end")
			}
			if p.err != nil {
				t.Fatalf("Pass() error = %v", p.err)
			}
			if !newEventInWindow {
				if out, err := billUntilFinal(ctx, t, svc, b2); err != nil || out != order.OutcomeCharged {
					t.Fatalf("new event of B = %s, %v, want charged under its own key", out, err)
				}
			}
			if got := p.res.Outcomes[order.OutcomeCharged]; got != 1 {
				t.Errorf("completer charged %d, want 1 (A only): %+v", got, p.res)
			}
			for _, call := range stub.Calls() {
				if call.Key == b.EventID.String() && call.Status == http.StatusCreated {
					t.Errorf("B's old key %s was charged after its invoice was rejected", b.EventID)
				}
			}
			wantOneCharge(t, stub, "ord-a")
			wantOneCharge(t, stub, "ord-b")
		})
	}
}

// TestTwoPathsNeverSendOneKeyAtOnce (the suspected
// race): the tier retry of an order's first event and a main-topic event of
// the same order both resume its pending invoice under K1. While the first
// one's request is on its way, the second must not send K1 too: had it got
// a 404 and rejected the invoice, a third event would reopen it under K3
// and be charged, and the first request, executed late by a gateway that
// stored nothing for the 404, would charge K1 as well.
func TestTwoPathsNeverSendOneKeyAtOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	stub, client := startStub(t)
	gw := newGatedGateway(client)
	svc := order.NewBillingService(store, gw, group)

	e1 := event(t, "ord-1")
	pendingAfter503(ctx, t, stub, svc, e1)

	// The tier retry of E1 sends K1 and its request is held on the way.
	openK1 := gw.gate(e1.EventID)
	defer openK1()
	tier := make(chan error, 1)
	go func() {
		_, err := billUntilFinal(ctx, t, svc, e1)
		tier <- err
	}()
	gw.waitEntered(t, e1.EventID)
	gw.mu.Lock()
	delete(gw.gates, e1.EventID) // later charges under K1 are not held
	gw.mu.Unlock()

	// Meanwhile E2 of the same order, from the main topic, would resume K1
	// and meet a 404; then E3 arrives. Each is let go as far as it gets
	// while K1 is on its way: done, or reserved (its dedup row written) and
	// waiting for the tier's attempt without sending anything.
	stop := refuseKey(stub, e1.EventID, http.StatusNotFound)
	e2, e3 := event(t, "ord-1"), event(t, "ord-1")
	main, third := make(chan error, 1), make(chan error, 1)
	for _, run := range []struct {
		evt order.OrderConfirmedEvent
		ch  chan error
	}{{e2, main}, {e3, third}} {
		go func() {
			_, err := billUntilFinal(ctx, t, svc, run.evt)
			run.ch <- err
		}()
		poll.Until(t, "the event done or waiting", 10*time.Second, func() bool {
			if len(run.ch) > 0 {
				return true
			}
			var seen bool
			err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM processed_event WHERE event_id = $1)`, run.evt.EventID).Scan(&seen)
			return err == nil && seen
		})
		if run.evt.EventID == e2.EventID {
			stop()
		}
	}
	openK1()

	for name, ch := range map[string]chan error{"tier retry of E1": tier, "E2": main, "E3": third} {
		select {
		case err := <-ch:
			if err != nil && order.Classify(err) != order.ClassPermanent {
				t.Errorf("%s: error = %v", name, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s did not end", name)
		}
	}
	wantOneCharge(t, stub, "ord-1")
}

// TestKeyReusedIsHeld: a 422 (the key was used with
// another body: money may have moved under it) holds the invoice for a
// person; no path sends its key again — not the completer, not the next
// event of the order — even when the gateway has meanwhile forgotten the
// key and would charge it.
func TestKeyReusedIsHeld(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	e.gw.SetAnswer(func(n int, _ order.ChargeRequest) (order.ChargeResult, error) {
		if n == 1 {
			return order.ChargeResult{}, refused(order.RefusalKeyReused, 422)
		}
		// The gateway forgot the key: a new request under it charges.
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-late"}, nil
	})
	evt := event(t, "ord-1")
	if _, err := e.svc.Bill(ctx, evt); order.Classify(err) != order.ClassPermanent {
		t.Fatalf("Bill() error = %v, want permanent (422: the record goes to the DLQ)", err)
	}
	if inv := e.invoice(ctx, t, "ord-1"); inv.Status != order.StatusHeld {
		t.Fatalf("invoice after a 422 = %s, want held", inv.Status)
	}
	if err := e.age(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	c := completer.New(e.store, e.svc, completer.Options{ResumeAfter: time.Minute})
	if res, err := c.Pass(ctx); err != nil || res.Claimed != 0 {
		t.Errorf("completer Pass() = %+v, %v, want nothing claimed", res, err)
	}
	if _, err := e.svc.Bill(ctx, event(t, "ord-1")); order.Classify(err) != order.ClassPermanent {
		t.Errorf("a new event of the held order: error = %v, want permanent (to the DLQ, for the person)", err)
	}
	if _, err := e.svc.Bill(ctx, evt); order.Classify(err) != order.ClassPermanent {
		t.Errorf("the 422'd event again: error = %v, want permanent (back to the DLQ, the invoice still held)", err)
	}
	if got := len(e.gw.Keys()); got != 1 {
		t.Errorf("gateway calls = %d, want 1: a held key is never sent again", got)
	}
	if inv := e.invoice(ctx, t, "ord-1"); inv.Status != order.StatusHeld {
		t.Errorf("invoice at the end = %s, want held", inv.Status)
	}
}

// TestReplayUndoesARejection: E1 gets a 503 (pending
// under K1); a corrected E2 resumes K1 (E1's body) and gets a 400: the
// invoice is rejected and E2 goes to the DLQ. Replaying E2 must reopen the
// order under E2 and charge it: same event id, same order it was first
// seen with. The same after the rejected settle was lost in a crash.
func TestReplayUndoesARejection(t *testing.T) {
	t.Parallel()
	for _, lost := range []bool{false, true} {
		name := "rejected"
		if lost {
			name = "rejected, the settle lost"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, _ := pgtest.NewDB(t)
			ledger := &beforeSettle{Store: postgres.NewStore(pool), pool: pool, rows: map[string]json.RawMessage{}}
			stub, client := startStub(t)
			svc := order.NewBillingService(ledger, client, group)

			e1, e2 := event(t, "ord-1"), event(t, "ord-1")
			if lost {
				// E1 is rejected, and the settle is lost: the invoice is
				// pending under K1 again, and E2 resumes K1.
				stop := refuseKey(stub, e1.EventID, http.StatusBadRequest)
				if _, err := billUntilFinal(ctx, t, svc, e1); order.Classify(err) != order.ClassPermanent {
					t.Fatalf("E1: error = %v, want permanent (400)", err)
				}
				stop()
				ledger.loseSettle(ctx, t, "ord-1")
			} else {
				pendingAfter503(ctx, t, stub, svc, e1)
			}
			stop := refuseKey(stub, e1.EventID, http.StatusBadRequest)
			defer stop()
			if _, err := billUntilFinal(ctx, t, svc, e2); order.Classify(err) != order.ClassPermanent {
				t.Fatalf("E2: error = %v, want permanent (400 on K1: to the DLQ)", err)
			}
			if inv := invoiceOf(ctx, t, ledger.Store, "ord-1"); inv.Status != order.StatusRejected || inv.EventID != e1.EventID {
				t.Fatalf("invoice after E2 = %s under %s, want rejected under K1", inv.Status, inv.EventID)
			}

			// The DLQ replay of E2.
			out, err := billUntilFinal(ctx, t, svc, e2)
			if err != nil || out != order.OutcomeCharged {
				t.Errorf("replay of E2 = %s, %v, want charged under E2's key", out, err)
			}
			if inv := invoiceOf(ctx, t, ledger.Store, "ord-1"); inv.Status != order.StatusCharged || inv.EventID != e2.EventID {
				t.Errorf("invoice after the replay = %s under %s, want charged under E2", inv.Status, inv.EventID)
			}
			wantOneCharge(t, stub, "ord-1")
		})
	}
}

// TestSettleThatMovedNothingIsNotCharged: when the
// settle of a charge moves nothing (another path settled or reopened the
// invoice meanwhile), the event is not counted charged.
func TestSettleThatMovedNothingIsNotCharged(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t)
	evt := event(t, "ord-1")
	var once sync.Once
	e.gw.SetAnswer(func(int, order.ChargeRequest) (order.ChargeResult, error) {
		once.Do(func() {
			// While the charge is at the gateway, another path settles it,
			// as a path that knows the fence does (it names the attempt:
			// migrations/0006 leaves such a write alone).
			if _, err := e.pool.Exec(ctx, `UPDATE invoice SET status = 'charged', charge_id = 'ch-other', attempt_until = NULL WHERE order_id = 'ord-1'`); err != nil {
				t.Error(err)
			}
		})
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-1"}, nil
	})
	out, err := billUntilFinal(ctx, t, e.svc, evt)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("Bill() error = %v", err)
	}
	if out == order.OutcomeCharged {
		t.Errorf("Bill() = charged, want not charged: its settle moved nothing")
	}
}
