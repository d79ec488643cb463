package stripe

import (
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/gatewaytest"
	"github.com/acme/billing/internal/testkit/stripemock"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := stripemock.StopShared(); err != nil {
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			code = 1
			_, _ = os.Stderr.WriteString("goleak: " + err.Error() + "\n")
		}
	}
	os.Exit(code)
}

// newClient returns a Client of the API at base with key, closed at the
// end of the test, and its metrics.
func newClient(t *testing.T, base, key string, timeout time.Duration, sopts ...Option) (*Client, *metrics.Metrics) {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry(), false)
	c, err := New(base, key, timeout, []httpgateway.Option{httpgateway.WithMetrics(&metrics.Gateway{Requests: m.PaymentRequests, Duration: m.PaymentDuration})}, sopts...)
	if err != nil {
		t.Fatalf("New(%q): %v", base, err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, m
}

// startStub runs the gateway stub, whose /v1/ endpoints speak Stripe.
func startStub(t *testing.T, opts gatewaystub.Options) (*gatewaystub.Stub, string) {
	t.Helper()
	s := gatewaystub.New(opts)
	return s, s.StartTest(t)
}

// TestContractOnStub runs the PaymentGateway and PaymentRecords contract on
// the adapter against the stub speaking Stripe's documented behaviour.
func TestContractOnStub(t *testing.T) {
	t.Parallel()
	gatewaytest.Run(t, func(t *testing.T) gatewaytest.Harness {
		stub, base := startStub(t, gatewaystub.Options{PageSize: 2})
		const timeout = time.Second
		c, _ := newClient(t, base, gatewaystub.DefaultStripeKey, timeout)
		bad, _ := newClient(t, base, "sk_test_revoked", timeout)
		return gatewaytest.Harness{Gateway: c, Records: c, Stub: stub, Unauthorized: bad, Timeout: timeout}
	})
}

// TestContractOnStripeMock runs the contract's stateless scenarios against
// stripe-mock, which validates every request against Stripe's OpenAPI
// specification (and the pinned Stripe-Version against the one it
// describes) and answers with Stripe's fixtures.
func TestContractOnStripeMock(t *testing.T) {
	t.Parallel()
	sm := stripemock.Shared(t)
	gatewaytest.Run(t, func(t *testing.T) gatewaytest.Harness {
		c, _ := newClient(t, sm.URL, stripemock.APIKey, 10*time.Second)
		bad, _ := newClient(t, sm.URL, "not-a-stripe-key", 10*time.Second)
		return gatewaytest.Harness{Gateway: c, Records: c, Unauthorized: bad}
	})
}

// Every request the adapter makes is one stripe-mock accepts, and each
// answer maps: its fixture PaymentIntent is in requires_payment_method, a
// decline; the list and the search answer fixtures without billing's
// metadata (Foreign).
func TestStripeMockAnswers(t *testing.T) {
	t.Parallel()
	sm := stripemock.Shared(t)
	c, m := newClient(t, sm.URL, stripemock.APIKey, 10*time.Second)
	res, err := c.Charge(t.Context(), gatewaytest.Request(t, "cus_mock", 12990))
	if err != nil || res.Status != order.ChargeDeclined {
		t.Fatalf("Charge = %+v, %v; want stripe-mock's requires_payment_method as a decline", res, err)
	}
	if got := testutil.ToFloat64(m.PaymentRequests.WithLabelValues("200")); got != 2 {
		t.Errorf("%v requests answered 200, want 2 (the customer, the PaymentIntent)", got)
	}
	// The payment method is cached: a second charge of the customer is one request.
	if _, err := c.Charge(t.Context(), gatewaytest.Request(t, "cus_mock", 100)); err != nil {
		t.Fatalf("second Charge: %v", err)
	}
	if got := testutil.ToFloat64(m.PaymentRequests.WithLabelValues("200")); got != 3 {
		t.Errorf("%v requests after the second charge, want 3: the payment method read once", got)
	}
	now := time.Now()
	page, err := c.ChargesCreated(t.Context(), now.Add(-24*time.Hour), now, "")
	if err != nil || len(page.Records) != 0 || page.Foreign != 1 || page.Next != "" {
		t.Errorf("ChargesCreated = %+v, %v; want stripe-mock's one PaymentIntent, not billing's", page, err)
	}
	if _, err := c.ChargesCreated(t.Context(), now.Add(-24*time.Hour), now, "pi_1PgafyB7WZ01zgkWSjxsAJo3"); err != nil {
		t.Errorf("ChargesCreated with a cursor: %v", err)
	}
	recs, err := c.ChargesOfOrder(t.Context(), "ord-'quoted'\\")
	if err != nil || len(recs) != 0 {
		t.Errorf("ChargesOfOrder = %v, %v; want none of billing's", recs, err)
	}
}

// stripe-mock runs with -strict-version-check: a Stripe-Version other than
// the one its specification describes is refused, so the contract passing
// on it says that APIVersion is the version the adapter was checked against.
func TestStripeMockChecksTheVersion(t *testing.T) {
	t.Parallel()
	sm := stripemock.Shared(t)
	for version, want := range map[string]int{APIVersion: http.StatusOK, "2025-08-27.basil": http.StatusBadRequest} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, sm.URL+"/v1/customers/cus_mock", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+stripemock.APIKey)
		req.Header.Set(headerVersion, version)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Stripe-Version %s: %d, want %d", version, resp.StatusCode, want)
		}
	}
}
