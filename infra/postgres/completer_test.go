package postgres_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/service/completer"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// stubPaymentTimeout is the payment timeout of startStub's client.
const stubPaymentTimeout = 5 * time.Second

// startStub runs a gateway stub and a client of it, both closed at the end.
func startStub(t *testing.T) (*gatewaystub.Stub, *httpgateway.Client) {
	t.Helper()
	stub := gatewaystub.New(gatewaystub.Options{})
	base := stub.StartTest(t)
	c, err := httpgateway.NewClient(base, stubPaymentTimeout)
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

	met := metrics.New(prometheus.NewRegistry(), false)
	c := completer.New(store, svc, completer.Options{
		ResumeAfter: time.Minute, Interval: 20 * time.Millisecond, PassTimeout: 200 * time.Millisecond,
		Metrics: met.Completer(),
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
		return testutil.ToFloat64(met.BackgroundLastSuccess.WithLabelValues(metrics.ServiceCompleter)) > 0 &&
			testutil.ToFloat64(met.InvoicesPending) == 0 && testutil.ToFloat64(met.PendingOldest) == 0
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

// TestClaimSkipsAnInvoiceWithALiveAttempt: a pending invoice whose attempt
// is still alive (another path's request under its key may be at the
// gateway; a release that records none gets one of the longest life from
// migration 0006) is not due: the claim leaves it, and its back-off, alone,
// so that the completer takes it as soon as the attempt ends rather than a
// doubled back-off later.
func TestClaimSkipsAnInvoiceWithALiveAttempt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool)
	stub, client := startStub(t)
	svc := order.NewBillingService(store, client, group)
	pendingAfter503(ctx, t, stub, svc, event(t, "ord-live"))
	if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour',
		attempt_id = -1, attempt_until = now() + interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	claim := order.PendingClaim{OlderThan: time.Minute, Limit: 10, Backoff: time.Minute, MaxBackoff: time.Hour}
	if invs, err := store.ClaimPending(ctx, claim); err != nil || len(invs) != 0 {
		t.Fatalf("ClaimPending() = %d invoices, %v; want none while its attempt lives", len(invs), err)
	}
	var attempts int
	if err := pool.QueryRow(ctx, `SELECT resume_attempts FROM invoice`).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("resume_attempts = %d, %v; want 0: no claim, no back-off", attempts, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE invoice SET attempt_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if invs, err := store.ClaimPending(ctx, claim); err != nil || len(invs) != 1 {
		t.Errorf("ClaimPending() after the attempt ended = %d invoices, %v; want it", len(invs), err)
	}
}
