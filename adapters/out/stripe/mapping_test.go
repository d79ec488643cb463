package stripe

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/gatewaytest"
)

// TestMapping checks each row of the Stripe mapping (docs/interface.md §6; the
// README's table) the contract suite does not: Stripe's own states and
// error types, Stripe-Should-Retry, the customer's payment method. Stripe's
// words never reach the error.
func TestMapping(t *testing.T) {
	t.Parallel()
	const (
		charged = iota + 1
		declined
		transient
		rejected
		held
		keyReused
		outage
	)
	tests := []struct {
		name     string
		customer string
		fault    gatewaystub.Fault
		want     int
		ended    bool // the error marks the attempt over
		posted   bool // a PaymentIntent was asked for
	}{
		{"200 succeeded", "cus_1", gatewaystub.Fault{}, charged, false, true},
		{"200 requires_action", "cus_1", gatewaystub.Fault{PIStatus: "requires_action"}, declined, false, true},
		{"200 requires_payment_method", "cus_1", gatewaystub.Fault{PIStatus: "requires_payment_method"}, declined, false, true},
		{"200 processing", "cus_1", gatewaystub.Fault{PIStatus: "processing"}, transient, false, true},
		{"200 requires_capture", "cus_1", gatewaystub.Fault{PIStatus: "requires_capture"}, held, false, true},
		{"200 canceled", "cus_1", gatewaystub.Fault{PIStatus: "canceled"}, held, false, true},
		{"200 a state that is no token", "cus_1", gatewaystub.Fault{PIStatus: "so\nmething"}, held, false, true},
		{"402 card_error", "declined-1", gatewaystub.Fault{}, declined, false, true},
		{"402 of another type", "cus_1", gatewaystub.Fault{Status: 402, ErrorType: "invalid_request_error"}, declined, false, true},
		{"400 idempotency_error", "cus_1", gatewaystub.Fault{Status: 400, ErrorType: "idempotency_error"}, keyReused, false, true},
		{"400 invalid_request_error", "cus_1", gatewaystub.Fault{Status: 400}, rejected, false, true},
		{"400 with Stripe-Should-Retry: true", "cus_1", gatewaystub.Fault{Status: 400, Header: map[string]string{"Stripe-Should-Retry": "true"}}, transient, true, true},
		{"404", "cus_1", gatewaystub.Fault{Status: 404}, rejected, false, true},
		{"409 idempotency_key_in_use", "cus_1", gatewaystub.Fault{Status: 409, ErrorCode: "idempotency_key_in_use"}, transient, false, true},
		{"409 with Stripe-Should-Retry: false", "cus_1", gatewaystub.Fault{Status: 409, Header: map[string]string{"Stripe-Should-Retry": "false"}}, held, false, true},
		{"429", "cus_1", gatewaystub.Fault{Status: 429}, transient, true, true},
		{"500", "cus_1", gatewaystub.Fault{Status: 500}, transient, false, true},
		{"500 with Stripe-Should-Retry: false", "cus_1", gatewaystub.Fault{Status: 500, Header: map[string]string{"Stripe-Should-Retry": "false"}}, held, false, true},
		{"503 with Stripe-Should-Retry: true", "cus_1", gatewaystub.Fault{Status: 503, Header: map[string]string{"Stripe-Should-Retry": "true"}}, transient, false, true},
		{"401", "cus_1", gatewaystub.Fault{Status: 401}, outage, true, true},
		{"403", "cus_1", gatewaystub.Fault{Status: 403}, outage, true, true},
		{"a customer Stripe does not know", "missing-1", gatewaystub.Fault{}, rejected, true, false},
		{"a customer without a default payment method", "nopm-1", gatewaystub.Fault{}, rejected, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stub, base := startStub(t, gatewaystub.Options{})
			stub.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
				if c.Route == "POST "+gatewaystub.StripePaymentIntentsPath {
					return tt.fault
				}
				return gatewaystub.Fault{}
			})
			c, _ := newClient(t, base, gatewaystub.DefaultStripeKey, 5*time.Second)
			res, err := c.Charge(t.Context(), gatewaytest.Request(t, tt.customer, 5000))
			ref, _ := errors.AsType[*order.ChargeRefusedError](err)
			var got int
			switch {
			case err == nil && res.Status == order.ChargeSucceeded:
				got = charged
			case err == nil && res.Status == order.ChargeDeclined:
				got = declined
			case order.Classify(err) == order.ClassOutage:
				got = outage
			case order.Classify(err) == order.ClassTransient:
				got = transient
			case ref != nil && ref.Kind == order.RefusalRejected:
				got = rejected
			case ref != nil && ref.Kind == order.RefusalIndeterminate:
				got = held
			case ref != nil && ref.Kind == order.RefusalKeyReused:
				got = keyReused
			}
			if got != tt.want {
				t.Fatalf("Charge = %+v, %v; want outcome %d, got %d", res, err, tt.want, got)
			}
			if err != nil && order.ChargeEnded(err) != tt.ended {
				t.Errorf("ChargeEnded = %v, want %v: %v", order.ChargeEnded(err), tt.ended, err)
			}
			if err != nil && (strings.Contains(err.Error(), "injected") || strings.Contains(err.Error(), "declined.") ||
				strings.Contains(err.Error(), "No such")) {
				t.Errorf("the error repeats Stripe's message: %v", err)
			}
			posted := false
			for _, call := range stub.Calls() {
				posted = posted || call.Route == "POST "+gatewaystub.StripePaymentIntentsPath
			}
			if posted != tt.posted {
				t.Errorf("a PaymentIntent was asked for: %v, want %v", posted, tt.posted)
			}
		})
	}
}

// A PaymentIntent answered processing is read again: Stripe replays the
// saved answer for the key, processing for ever, while the PaymentIntent
// itself moves on. Once it succeeded, the next attempt under the key is
// the charge, with the PaymentIntent's id.
func TestProcessingIsReadAgain(t *testing.T) {
	t.Parallel()
	stub, base := startStub(t, gatewaystub.Options{})
	stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault { return gatewaystub.Fault{PIStatus: "processing"} })
	c, _ := newClient(t, base, gatewaystub.DefaultStripeKey, 5*time.Second)
	req := gatewaytest.Request(t, "cus_1", 5000)
	_, err := c.Charge(t.Context(), req)
	if order.Classify(err) != order.ClassTransient {
		t.Fatalf("Charge = %v, want transient while processing", err)
	}
	attempts := stub.Attempts()
	if len(attempts) != 1 || !stub.SetIntentStatus(attempts[0].ID, "succeeded") {
		t.Fatalf("attempts = %+v, want one PaymentIntent", attempts)
	}
	res, err := c.Charge(t.Context(), req)
	if err != nil || res.Status != order.ChargeSucceeded || res.ChargeID != attempts[0].ID || !res.Replayed {
		t.Fatalf("Charge = %+v, %v; want the PaymentIntent %s charged", res, err, attempts[0].ID)
	}
	if n := len(stub.ChargesForOrder(req.OrderID)); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

// Replies no Stripe sends: a succeeded PaymentIntent whose id breaks the
// charge id rule is still charged (the money moved), without an id; a 200
// without a PaymentIntent is asked again under the key.
func TestHostileReplies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want order.ChargeResult
		err  order.Class // -1: none
	}{
		{"id with a NUL", `{"id":"pi_\u0000x","object":"payment_intent","status":"succeeded"}`,
			order.ChargeResult{Status: order.ChargeSucceeded}, -1},
		{"id of 300 bytes", `{"id":"pi_` + strings.Repeat("x", 300) + `","object":"payment_intent","status":"succeeded"}`,
			order.ChargeResult{Status: order.ChargeSucceeded}, -1},
		{"not JSON", `<html>ok</html>`, order.ChargeResult{}, order.ClassTransient},
		{"another object", `{"id":"cus_1","object":"customer","status":"succeeded"}`, order.ChargeResult{}, order.ClassTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte(`{"id":"cus_1","object":"customer","invoice_settings":{"default_payment_method":"pm_1"}}`))
					return
				}
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			c, _ := newClient(t, srv.URL, "sk_test_1", 5*time.Second)
			res, err := c.Charge(t.Context(), gatewaytest.Request(t, "cus_1", 5000))
			if tt.err == -1 && (err != nil || res != tt.want) || tt.err != -1 && order.Classify(err) != tt.err {
				t.Fatalf("Charge = %+v, %v; want %+v, class %v", res, err, tt.want, tt.err)
			}
		})
	}
}

// The secret key goes in Authorization and nowhere else: not in errors,
// not in the debug log of each request, not in the URL.
func TestKeyStaysSecret(t *testing.T) {
	t.Parallel()
	const key = "sk_live_S3CRETkey"
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization")+" "+r.URL.String())
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: ` + key + `"}}`))
	}))
	t.Cleanup(srv.Close)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := New(srv.URL, key, 5*time.Second, []httpgateway.Option{httpgateway.WithLogger(log)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	_, err = c.Charge(t.Context(), gatewaytest.Request(t, "cus_1", 5000))
	if order.Classify(err) != order.ClassOutage {
		t.Fatalf("Charge = %v, want an outage", err)
	}
	if strings.Contains(err.Error(), "S3CRET") || strings.Contains(logs.String(), "S3CRET") {
		t.Errorf("the key leaked: error %q, logs %q", err, logs.String())
	}
	if len(got) != 1 || got[0] != "Bearer "+key+" /v1/customers/cus_1?expand%5B%5D=invoice_settings.default_payment_method" {
		t.Errorf("requests = %q, want the key as a bearer token only", got)
	}
	for _, bad := range []string{"", "sk test", "sk_\x00"} {
		if _, err := New(srv.URL, bad, time.Second, nil); err == nil {
			t.Errorf("New with key %q: no error", bad)
		} else if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("New's error repeats the key: %v", err)
		}
	}
}
