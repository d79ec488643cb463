package completer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/service/completer"
)

// The pending completer's tests run over the in-memory store, which keeps
// order.PendingLedger's contract as the Postgres store does
// (ledgertest.RunPending): the completer's own rules need no database.

// clock is a test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// leavePending opens orderID's invoice with an attempt that ends at once:
// an event whose charge never settled (its pod lost, or dead-lettered).
func leavePending(t *testing.T, l order.Ledger, orderID string) uuid.UUID {
	t.Helper()
	key := uuid.Must(uuid.NewV7())
	r, err := l.Reserve(t.Context(), order.Invoice{OrderID: orderID, EventID: key, CustomerID: "cus-" + orderID, Amount: 12990,
		Currency: "EUR", Status: order.StatusPending}, "billing", order.AttemptTerms{Life: time.Nanosecond})
	if err != nil || r.Attempt == 0 {
		t.Fatalf("Reserve(%s) = %+v, %v", orderID, r, err)
	}
	return key
}

// refusal is the gateway's refusal of a charge with code.
func refusal(kind order.RefusalKind, code int) error {
	return &order.PermanentError{Op: "charge", Err: &order.ChargeRefusedError{Kind: kind, StatusCode: code, Err: fmt.Errorf("%d", code)}}
}

var (
	rejected  = refusal(order.RefusalRejected, 400)
	keyReused = refusal(order.RefusalKeyReused, 422)
	// transient is a 503: the gateway answered, nothing of the request runs
	// there, so its attempt ends at once.
	transient = order.MarkChargeEnded(&order.TransientError{Op: "charge", Err: errors.New("503")})
)

// newMetrics returns the metrics on a registry of the test's own.
func newMetrics() *metrics.Metrics { return metrics.New(prometheus.NewRegistry(), false) }

// youngTerms are attempts of the configuration's life whose keys are held
// only after a day: a test's hours of clock leave them young.
var youngTerms = order.WithAttemptTerms(order.AttemptTerms{Life: 15 * time.Second, HoldAfter: 24 * time.Hour})

// TestCompleterOutcomes: what one resume does to the invoice, by the
// gateway's answer. An outage ends the pass before the next invoice.
func TestCompleterOutcomes(t *testing.T) {
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
		{"4xx rejected", rejected, false, order.StatusRejected, 2},
		{"422 held", keyReused, false, order.StatusHeld, 2},
		{"transient stays pending", &order.TransientError{Op: "charge", Err: errors.New("503")}, false, order.StatusPending, 2},
		{"outage stops the pass", &order.OutageError{Dependency: "gateway", Err: errors.New("401")}, false, order.StatusPending, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			mem := ledgertest.NewMemOn(clk.Now)
			gw := &ledgertest.Gateway{Answer: func(int, order.ChargeRequest) (order.ChargeResult, error) {
				if tt.answer != nil {
					return order.ChargeResult{}, tt.answer
				}
				if tt.declined {
					return order.ChargeResult{Status: order.ChargeDeclined}, nil
				}
				return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-1"}, nil
			}}
			for _, id := range []string{"ord-1", "ord-2"} {
				leavePending(t, mem, id)
			}
			clk.Advance(time.Hour)
			c := completer.New(mem, order.NewBillingService(mem, gw, "billing", youngTerms),
				completer.Options{ResumeAfter: time.Minute})
			res, err := c.Pass(t.Context())
			if err != nil || res.Claimed != 2 {
				t.Fatalf("Pass() = %+v, %v, want 2 claimed", res, err)
			}
			if got := len(gw.Keys()); got != tt.wantCalls {
				t.Errorf("gateway calls = %d, want %d", got, tt.wantCalls)
			}
			if inv, _ := mem.Invoice("ord-1"); inv.Status != tt.wantStatus {
				t.Errorf("invoice = %+v, want %s", inv, tt.wantStatus)
			}
			st, err := mem.PendingStats(t.Context())
			wantPending, wantHeld := 0, 0
			switch tt.wantStatus {
			case order.StatusPending:
				wantPending = 2
			case order.StatusHeld:
				wantHeld = 2
			}
			if err != nil || st.Count != wantPending || st.Held != wantHeld || (wantPending > 0 && st.Oldest != time.Hour) {
				t.Errorf("PendingStats() = %+v, %v, want %d pending, the oldest an hour, %d held", st, err, wantPending, wantHeld)
			}
			if tt.wantStatus == order.StatusHeld && res.Held != 2 {
				t.Errorf("Pass() = %+v, want both held", res)
			}
		})
	}
}

// TestCompleterSendsNothingWhilePaused: while consumption is paused (an
// operator's pause, a release this one is not safe beside), a pass sends
// no key, holds nothing and claims nothing, yet refreshes the gauges and
// counts as completed; a pause that begins in the middle of a pass stops it
// before the next invoice; once consumption resumes, the invoices are
// resumed.
func TestCompleterSendsNothingWhilePaused(t *testing.T) {
	t.Parallel()
	clk := newClock()
	mem := ledgertest.NewMemOn(clk.Now)
	for i := range 3 {
		leavePending(t, mem, fmt.Sprintf("ord-%d", i))
	}
	clk.Advance(time.Hour)
	var (
		paused atomic.Bool
		asked  atomic.Int64
	)
	paused.Store(true)
	gw := &ledgertest.Gateway{}
	m := newMetrics()
	c := completer.New(mem, order.NewBillingService(mem, gw, "billing", youngTerms), completer.Options{
		ResumeAfter: time.Minute, PassTimeout: 10 * time.Second,
		Metrics: m.Completer(),
		Paused: func() (bool, string) {
			asked.Add(1)
			return paused.Load(), "operator: paused by a test"
		},
	})
	res, err := c.Pass(t.Context())
	if err != nil || res.Paused != "operator: paused by a test" || res.Claimed != 0 || len(gw.Keys()) != 0 {
		t.Fatalf("paused pass = %+v, %v, %d gateway calls; want nothing claimed or sent, and why", res, err, len(gw.Keys()))
	}
	if pending, last := testutil.ToFloat64(m.InvoicesPending), testutil.ToFloat64(m.BackgroundLastSuccess.WithLabelValues(metrics.ServiceCompleter)); pending != 3 || last == 0 {
		t.Errorf("billing_invoices_pending %v, last success %v; want the pending invoices counted and the pass completed", pending, last)
	}
	if again, err := mem.ClaimPending(t.Context(), order.PendingClaim{Limit: 10}); err != nil || len(again) != 3 {
		t.Errorf("ClaimPending() after the paused pass = %d, %v; want all 3 left unclaimed", len(again), err)
	}

	// Consumption resumes, and is paused again after the first invoice.
	clk.Advance(2 * time.Hour) // past the test's own claim's back-off
	paused.Store(false)
	gw.SetAnswer(func(int, order.ChargeRequest) (order.ChargeResult, error) {
		paused.Store(true)
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-1"}, nil
	})
	res, err = c.Pass(t.Context())
	if err != nil || res.Claimed != 3 || res.Paused == "" || len(gw.Keys()) != 1 {
		t.Fatalf("pass paused after its first invoice = %+v, %v, %d gateway calls; want 3 claimed, 1 sent, then paused",
			res, err, len(gw.Keys()))
	}
	if asked.Load() < 3 {
		t.Errorf("Paused asked %d times, want before the pass and before each invoice", asked.Load())
	}
}

// failingHold is the store with a HoldStale that fails, as it did for 13
// hours in issue 31.5.
type failingHold struct{ *ledgertest.Mem }

func (failingHold) HoldStale(context.Context, order.AttemptTerms) ([]string, error) {
	return nil, errors.New("hold stale invoices: canceling statement due to lock timeout")
}

// TestCompleterStatsFreshWhenHoldStaleFails: the pending gauges are the
// completer's statistics; a pass whose HoldStale fails still refreshes
// them (before issue 31.5 it returned first, and
// billing_invoice_pending_oldest_seconds kept its last value while the
// oldest pending invoice aged 13 hours), goes on resuming, and is not a
// success.
func TestCompleterStatsFreshWhenHoldStaleFails(t *testing.T) {
	t.Parallel()
	clk := newClock()
	mem := ledgertest.NewMemOn(clk.Now)
	leavePending(t, mem, "ord-1")
	clk.Advance(13 * time.Hour)
	m := newMetrics()
	c := completer.New(failingHold{mem}, order.NewBillingService(mem, &ledgertest.Gateway{}, "billing", youngTerms),
		completer.Options{ResumeAfter: time.Hour, PassTimeout: 10 * time.Second, Metrics: m.Completer()})
	if _, err := c.Pass(t.Context()); err == nil {
		t.Error("Pass() error = nil, want HoldStale's")
	}
	if pending, oldest := testutil.ToFloat64(m.InvoicesPending), testutil.ToFloat64(m.PendingOldest); pending != 1 || oldest < (13*time.Hour).Seconds() {
		t.Errorf("billing_invoices_pending %v, billing_invoice_pending_oldest_seconds %v; want 1 pending, 13 hours old", pending, oldest)
	}
	if testutil.ToFloat64(m.BackgroundLastSuccess.WithLabelValues(metrics.ServiceCompleter)) != 0 {
		t.Error("a pass whose HoldStale failed counted as a success")
	}
	if inv, _ := mem.Invoice("ord-1"); inv.Status != order.StatusCharged {
		t.Errorf("invoice = %s, want charged by the pass's resume", inv.Status)
	}
}

// TestCompleterLoopChargesOnce: the completer's loop resumes an invoice
// left pending under its recorded key through the gateway's failures, its
// back-off spacing them, and the order ends charged exactly once.
func TestCompleterLoopChargesOnce(t *testing.T) {
	t.Parallel()
	mem := ledgertest.NewMem()
	charged := make(chan struct{})
	gw := &ledgertest.Gateway{Answer: func(n int, _ order.ChargeRequest) (order.ChargeResult, error) {
		if n <= 3 { // the consumer's attempt, then the completer's first two
			return order.ChargeResult{}, transient
		}
		if n == 4 {
			close(charged)
		}
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-1"}, nil
	}}
	svc := order.NewBillingService(mem, gw, "billing")
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-1", CustomerID: "cus-1", TotalAmount: 12990, Currency: "EUR",
		ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Bill(t.Context(), evt); order.Classify(err) != order.ClassTransient {
		t.Fatalf("Bill() error = %v, want transient (the event then goes through the tiers to the DLQ)", err)
	}
	c := completer.New(mem, svc, completer.Options{
		ResumeAfter: time.Millisecond, Interval: 20 * time.Millisecond, PassTimeout: 200 * time.Millisecond,
	})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-charged:
	case <-time.After(30 * time.Second):
		t.Fatal("the completer never charged the pending invoice")
	}
	c.Stop()
	if inv, _ := mem.Invoice("ord-1"); inv.Status != order.StatusCharged {
		t.Errorf("invoice = %+v, want charged", inv)
	}
	keys := gw.Keys()
	if len(keys) != 4 {
		t.Errorf("gateway calls = %d, want 4 (three refused, one charge)", len(keys))
	}
	for _, k := range keys {
		if k != evt.EventID {
			t.Errorf("call under key %s, want every call under %s", k, evt.EventID)
		}
	}
}
