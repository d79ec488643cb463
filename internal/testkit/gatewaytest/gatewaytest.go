// Package gatewaytest is the contract of order.PaymentGateway and
// order.PaymentRecords, run on every payment adapter (in the manner of
// watermill's pubsub/tests and core/order/ledgertest): what a charge, a
// replay, a decline, a refusal, a key reused with another body, a request
// in progress, a provider refusing the service, an unwell provider and a
// lost reply must give billing, whatever protocol the adapter speaks; and
// that the provider's records of those attempts come back through the
// lookup and the list, under any key and after the key is forgotten.
//
// The generic client runs it against the gateway stub
// (adapters/out/http), the Stripe adapter against the stub's Stripe
// endpoints and against stripe-mock (adapters/out/stripe). stripe-mock
// stores nothing and answers every charge with the same fixture, so a
// harness without a stub runs only the scenarios that need no state.
package gatewaytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/poll"
)

// Harness is one adapter under test, built afresh for each scenario.
type Harness struct {
	// Gateway and Records are the adapter (one value implementing both,
	// usually). Records nil skips the lookup scenarios.
	Gateway order.PaymentGateway
	Records order.PaymentRecords
	// Stub is the gateway stub the adapter talks to, for the scenarios
	// that need the provider's state or a fault; nil (stripe-mock) runs
	// only those that need neither.
	Stub *gatewaystub.Stub
	// Unauthorized is the same adapter with credentials the provider
	// refuses; nil skips that scenario (the generic stub checks none: a
	// fault stands for it).
	Unauthorized order.PaymentGateway
	// Timeout is the adapter's payment timeout: the lost reply scenario
	// delays the stub's answer past it.
	Timeout time.Duration
}

// NewHarness builds a Harness for one scenario; it registers its own
// cleanup on t.
type NewHarness func(t *testing.T) Harness

// scenario is one test of the contract.
type scenario struct {
	name     string
	stateful bool // needs Harness.Stub
	records  bool // needs Harness.Records
	run      func(t *testing.T, h Harness)
}

var scenarios = []scenario{
	{"a charge is answered and mapped", false, false, testAnswered},
	{"refused credentials are an outage", false, false, testUnauthorized},
	{"the records of a period and of an order are read", false, true, testRecordsRead},
	{"a charge succeeds once", true, false, testCharged},
	{"the same key replays the charge", true, false, testReplay},
	{"a decline is a result, replayed too", true, false, testDeclined},
	{"a refusal moves no money and saves nothing under the key", true, false, testRefused},
	{"the key with another body is held", true, false, testKeyReused},
	{"the key still in progress is transient", true, false, testInProgress},
	{"an unwell provider is transient, with its Retry-After", true, false, testUnwell},
	{"the provider refusing the service is an outage", true, false, testServiceRefused},
	{"a lost reply is transient and the retry finds the charge", true, false, testLostReply},
	{"every attempt of an order is found, past its key", true, true, testOrderRecords},
	{"the attempts of a period are listed page by page", true, true, testPeriodRecords},
}

// Run runs every scenario the harness can run, each a parallel subtest
// with a harness of its own.
func Run(t *testing.T, newHarness NewHarness) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if sc.stateful && h.Stub == nil {
				t.Skip("needs a provider that keeps state (the stub)")
			}
			if sc.records && h.Records == nil {
				t.Skip("the adapter reads no records")
			}
			sc.run(t, h)
		})
	}
}

var orders atomic.Int64

// Request returns a charge of amount EUR for a new order of customer under
// a new key.
func Request(t testing.TB, customer string, amount int64) order.ChargeRequest {
	t.Helper()
	key, err := uuid.NewV7()
	if err != nil {
		t.Fatalf("new key: %v", err)
	}
	return order.ChargeRequest{IdempotencyKey: key, OrderID: fmt.Sprintf("ord-%d-%s", orders.Add(1), key.String()[24:]),
		CustomerID: customer, Amount: order.Money{Amount: amount, Currency: "EUR"}}
}

func charge(t *testing.T, g order.PaymentGateway, req order.ChargeRequest) (order.ChargeResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return g.Charge(ctx, req)
}

func mustCharge(t *testing.T, g order.PaymentGateway, req order.ChargeRequest) order.ChargeResult {
	t.Helper()
	res, err := charge(t, g, req)
	if err != nil {
		t.Fatalf("Charge(%s): %v", req.OrderID, err)
	}
	return res
}

// wantClass fails t unless err is of class c.
func wantClass(t *testing.T, err error, c order.Class) {
	t.Helper()
	if err == nil || order.Classify(err) != c {
		t.Fatalf("error = %v (class %v), want a %v error", err, classOf(err), c)
	}
}

func classOf(err error) any {
	if err == nil {
		return "none"
	}
	return order.Classify(err)
}

// wantRefusal fails t unless err is a refusal of kind k.
func wantRefusal(t *testing.T, err error, k order.RefusalKind) {
	t.Helper()
	ref, ok := errors.AsType[*order.ChargeRefusedError](err)
	if !ok || ref.Kind != k {
		t.Fatalf("error = %v, want a refusal of kind %d", err, k)
	}
	wantClass(t, err, order.ClassPermanent)
}

func testAnswered(t *testing.T, h Harness) {
	res, err := charge(t, h.Gateway, Request(t, "cus_contract", 1250))
	if err != nil {
		t.Fatalf("Charge: %v (a request the provider does not accept, or an answer not mapped)", err)
	}
	switch res.Status {
	case order.ChargeSucceeded:
		if res.ChargeID != "" && !order.ValidChargeID(res.ChargeID) {
			t.Errorf("charge id %q breaks the charge id rule", res.ChargeID)
		}
	case order.ChargeDeclined:
		if res.ChargeID != "" {
			t.Errorf("a decline with charge id %q", res.ChargeID)
		}
	default:
		t.Errorf("result %+v is neither a charge nor a decline", res)
	}
}

func testUnauthorized(t *testing.T, h Harness) {
	if h.Unauthorized == nil {
		t.Skip("the provider checks no credentials")
	}
	_, err := charge(t, h.Unauthorized, Request(t, "cus_contract", 1250))
	wantClass(t, err, order.ClassOutage)
	if !order.ChargeEnded(err) {
		t.Errorf("a refusal of the service left its attempt running: %v", err)
	}
}

func testRecordsRead(t *testing.T, h Harness) {
	now := time.Now()
	page, err := h.Records.ChargesCreated(t.Context(), now.Add(-time.Hour), now.Add(time.Minute), "")
	if err != nil {
		t.Fatalf("ChargesCreated: %v", err)
	}
	for _, r := range page.Records {
		if r.Status == "" || !order.ValidChargeID(r.ChargeID) {
			t.Errorf("record %+v not checked", r)
		}
	}
	if _, err := h.Records.ChargesOfOrder(t.Context(), "ord-contract"); err != nil {
		t.Fatalf("ChargesOfOrder: %v", err)
	}
}

func testCharged(t *testing.T, h Harness) {
	req := Request(t, "cus_contract", 4200)
	res := mustCharge(t, h.Gateway, req)
	if res.Status != order.ChargeSucceeded || res.Replayed {
		t.Fatalf("result = %+v, want a first charge", res)
	}
	got := h.Stub.ChargesForOrder(req.OrderID)
	if len(got) != 1 || got[0].Amount != 4200 || got[0].Currency != "EUR" || got[0].Key != req.IdempotencyKey.String() {
		t.Fatalf("provider's charges = %+v, want one of 4200 EUR under the key", got)
	}
	if res.ChargeID != got[0].ID {
		t.Errorf("charge id = %q, want the provider's %q", res.ChargeID, got[0].ID)
	}
}

func testReplay(t *testing.T, h Harness) {
	req := Request(t, "cus_contract", 4200)
	first := mustCharge(t, h.Gateway, req)
	again := mustCharge(t, h.Gateway, req)
	if again.Status != order.ChargeSucceeded || again.ChargeID != first.ChargeID || !again.Replayed {
		t.Fatalf("replay = %+v, want the first charge %q replayed", again, first.ChargeID)
	}
	if n := len(h.Stub.ChargesForOrder(req.OrderID)); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func testDeclined(t *testing.T, h Harness) {
	req := Request(t, "declined-contract", 4200)
	for i := range 2 {
		res := mustCharge(t, h.Gateway, req)
		if res.Status != order.ChargeDeclined || res.ChargeID != "" {
			t.Fatalf("try %d: result = %+v, want a decline", i+1, res)
		}
	}
	if n := len(h.Stub.ChargesForOrder(req.OrderID)); n != 0 {
		t.Fatalf("%d charges for a decline", n)
	}
}

func testRefused(t *testing.T, h Harness) {
	req := Request(t, "refused-contract", 4200)
	_, err := charge(t, h.Gateway, req)
	wantRefusal(t, err, order.RefusalRejected)
	if n := len(h.Stub.ChargesForOrder(req.OrderID)); n != 0 {
		t.Fatalf("%d charges for a refusal", n)
	}
	// Nothing was saved under the key: a corrected request under it runs.
	req.CustomerID = "cus_contract"
	if res := mustCharge(t, h.Gateway, req); res.Status != order.ChargeSucceeded || res.Replayed {
		t.Fatalf("the key after a refusal = %+v, want a first charge", res)
	}
}

func testKeyReused(t *testing.T, h Harness) {
	req := Request(t, "cus_contract", 4200)
	mustCharge(t, h.Gateway, req)
	req.Amount.Amount = 4300
	_, err := charge(t, h.Gateway, req)
	wantRefusal(t, err, order.RefusalKeyReused)
	if n := len(h.Stub.ChargesForOrder(req.OrderID)); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func testInProgress(t *testing.T, h Harness) {
	req := Request(t, "cus_contract", 4200)
	entered := make(chan struct{})
	var once atomic.Bool
	delay := 2 * time.Second // long enough for a second request to arrive, short of the adapter's timeout
	if h.Timeout > 0 {
		delay = min(delay, h.Timeout/2)
	}
	h.Stub.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		if c.Key == req.IdempotencyKey.String() && n == 1 && once.CompareAndSwap(false, true) {
			close(entered)
			return gatewaystub.Fault{Delay: delay}
		}
		return gatewaystub.Fault{}
	})
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := h.Gateway.Charge(ctx, req)
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first request never reached the provider")
	}
	// The hook runs before the stub takes the key; a second request sent
	// between the two would take it itself and be charged.
	poll.Until(t, "the first request holds its key", 30*time.Second, func() bool {
		return h.Stub.InFlight(req.IdempotencyKey.String())
	})
	_, err := charge(t, h.Gateway, req)
	wantClass(t, err, order.ClassTransient)
	if order.ChargeEnded(err) {
		t.Errorf("a request in progress under the key was taken for over: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first request: %v", err)
	}
	if n := len(h.Stub.ChargesForOrder(req.OrderID)); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func testUnwell(t *testing.T, h Harness) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		req := Request(t, "cus_contract", 4200)
		h.Stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
			return gatewaystub.Fault{Status: status, Header: map[string]string{"Retry-After": "7"}}
		})
		_, err := charge(t, h.Gateway, req)
		wantClass(t, err, order.ClassTransient)
		te, ok := errors.AsType[*order.TransientError](err)
		if !ok || te.RetryAfter != 7*time.Second {
			t.Errorf("%d: error = %v, want a transient error asking for 7s", status, err)
		}
		h.Stub.SetFault(nil)
		if res := mustCharge(t, h.Gateway, req); res.Status != order.ChargeSucceeded || res.Replayed {
			t.Fatalf("%d: the key afterwards = %+v, want a first charge (nothing was saved)", status, res)
		}
	}
}

func testServiceRefused(t *testing.T, h Harness) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		h.Stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault { return gatewaystub.Fault{Status: status} })
		_, err := charge(t, h.Gateway, Request(t, "cus_contract", 4200))
		wantClass(t, err, order.ClassOutage)
	}
}

func testLostReply(t *testing.T, h Harness) {
	if h.Timeout <= 0 {
		t.Skip("the harness names no timeout")
	}
	req := Request(t, "cus_contract", 4200)
	h.Stub.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		if c.Key == req.IdempotencyKey.String() && n == 1 {
			return gatewaystub.Fault{Delay: h.Timeout + 500*time.Millisecond}
		}
		return gatewaystub.Fault{}
	})
	_, err := charge(t, h.Gateway, req)
	wantClass(t, err, order.ClassTransient)
	if order.ChargeEnded(err) {
		t.Errorf("a request that timed out was taken for over: %v", err)
	}
	// The provider finishes what it began; asking again under the key
	// finds the charge, never makes a second.
	var res order.ChargeResult
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err = charge(t, h.Gateway, req)
		if err == nil || order.Classify(err) != order.ClassTransient || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || res.Status != order.ChargeSucceeded {
		t.Fatalf("retry = %+v, %v; want the charge", res, err)
	}
	if n := len(h.Stub.ChargesForOrder(req.OrderID)); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func testOrderRecords(t *testing.T, h Harness) {
	req := Request(t, "declined-contract", 4200)
	mustCharge(t, h.Gateway, req)
	// The provider forgets the key (its lifetime passed); the attempt it
	// made stays on record, and a charge under the same key now runs anew.
	h.Stub.Forget(req.IdempotencyKey.String())
	req.CustomerID = "cus_contract"
	first := mustCharge(t, h.Gateway, req)
	other := req
	other.IdempotencyKey = uuid.Must(uuid.NewV7())
	second := mustCharge(t, h.Gateway, other)

	recs, err := h.Records.ChargesOfOrder(t.Context(), req.OrderID)
	if err != nil {
		t.Fatalf("ChargesOfOrder: %v", err)
	}
	var statuses []order.RecordStatus
	var ids []string
	for _, r := range recs {
		statuses = append(statuses, r.Status)
		ids = append(ids, r.ChargeID)
		if r.OrderID != req.OrderID || r.Amount != req.Amount || r.CreatedAt.IsZero() {
			t.Errorf("record %+v, want order %s, %v", r, req.OrderID, req.Amount)
		}
	}
	want := []order.RecordStatus{order.RecordDeclined, order.RecordSucceeded, order.RecordSucceeded}
	if !slices.Equal(statuses, want) {
		t.Fatalf("statuses = %v, want %v (oldest first)", statuses, want)
	}
	if ids[1] != first.ChargeID || ids[2] != second.ChargeID {
		t.Errorf("charge ids = %v, want …, %s, %s", ids, first.ChargeID, second.ChargeID)
	}
	if recs[0].Key != req.IdempotencyKey.String() || recs[2].Key != other.IdempotencyKey.String() {
		t.Errorf("keys = %s, %s; want %s, %s", recs[0].Key, recs[2].Key, req.IdempotencyKey, other.IdempotencyKey)
	}
}

func testPeriodRecords(t *testing.T, h Harness) {
	from := time.Now().Add(-2 * time.Second)
	want := map[string]bool{}
	for i := range 5 {
		res := mustCharge(t, h.Gateway, Request(t, "cus_contract", int64(100+i)))
		want[res.ChargeID] = true
	}
	// Planted outside the period: not listed.
	h.Stub.Plant(gatewaystub.Attempt{OrderID: "ord-before", Key: uuid.Must(uuid.NewV7()).String(), Amount: 1,
		Currency: "EUR", Status: gatewaystub.AttemptSucceeded, Time: from.Add(-time.Hour)})
	to := time.Now().Add(2 * time.Second)
	got := map[string]bool{}
	cursor, pages := "", 0
	for {
		page, err := h.Records.ChargesCreated(t.Context(), from, to, cursor)
		if err != nil {
			t.Fatalf("ChargesCreated page %d: %v", pages+1, err)
		}
		pages++
		for _, r := range page.Records {
			if got[r.ChargeID] {
				t.Errorf("%s listed twice", r.ChargeID)
			}
			got[r.ChargeID] = true
		}
		if cursor = page.Next; cursor == "" || pages > 20 {
			break
		}
	}
	for id := range want {
		if !got[id] {
			t.Errorf("%s not listed", id)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d listed, want %d", len(got), len(want))
	}
	if pages < 2 {
		t.Errorf("%d page(s): the harness's stub should page (gatewaystub.Options.PageSize)", pages)
	}
}
