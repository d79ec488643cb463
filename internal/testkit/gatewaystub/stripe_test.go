package gatewaystub

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/poll"
)

// stripePost posts form under key with the stub's API key.
func stripePost(t *testing.T, base, key string, form url.Values) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+StripePaymentIntentsPath, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+DefaultStripeKey)
	req.Header.Set(HeaderIdempotencyKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, resp.Header, body
}

func intentForm(orderID, customer string, amount string) url.Values {
	return url.Values{"amount": {amount}, "currency": {"eur"}, "customer": {customer}, "payment_method": {"pm_" + customer},
		"confirm": {"true"}, "off_session": {"true"}, "metadata[order_id]": {orderID}, "metadata[event_id]": {"k"}}
}

func errType(body map[string]any) (string, string) {
	e, _ := body["error"].(map[string]any)
	typ, _ := e["type"].(string)
	code, _ := e["code"].(string)
	return typ, code
}

// The stub's PaymentIntents follow Stripe's idempotency as documented: the
// same key and parameters replay the saved answer (Idempotent-Replayed),
// other parameters get a 400 idempotency_error, a key still executing a
// 409 idempotency_key_in_use, and a request that failed validation saves
// nothing.
func TestStripeIdempotency(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	base := s.StartTest(t)

	status, _, bad := stripePost(t, base, "k1", intentForm("ord-1", "cus_1", "-5"))
	if typ, _ := errType(bad); status != http.StatusBadRequest || typ != "invalid_request_error" {
		t.Fatalf("invalid amount = %d %v, want 400 invalid_request_error", status, bad)
	}
	status, h, first := stripePost(t, base, "k1", intentForm("ord-1", "cus_1", "500"))
	if status != http.StatusOK || first["status"] != "succeeded" || h.Get(HeaderReplayed) != "" {
		t.Fatalf("first = %d %v, want a succeeded PaymentIntent (the invalid request saved nothing)", status, first)
	}
	status, h, again := stripePost(t, base, "k1", intentForm("ord-1", "cus_1", "500"))
	if status != http.StatusOK || again["id"] != first["id"] || h.Get(HeaderReplayed) != "true" {
		t.Fatalf("replay = %d %v (replayed %q), want %v again", status, again, h.Get(HeaderReplayed), first["id"])
	}
	status, _, other := stripePost(t, base, "k1", intentForm("ord-1", "cus_1", "600"))
	if typ, _ := errType(other); status != http.StatusBadRequest || typ != "idempotency_error" {
		t.Fatalf("other parameters = %d %v, want 400 idempotency_error", status, other)
	}

	done := make(chan int, 1)
	s.SetFault(func(c Call, n int) Fault {
		if c.Key == "k3" && n == 1 {
			return Fault{Delay: time.Second}
		}
		return Fault{}
	})
	go func() {
		st, _, _ := stripePost(t, base, "k3", intentForm("ord-3", "cus_1", "500"))
		done <- st
	}()
	poll.Until(t, "the first request under k3 executing", 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, executing := s.piKeys["k3"]
		return executing
	})
	status, _, busy := stripePost(t, base, "k3", intentForm("ord-3", "cus_1", "500"))
	if typ, code := errType(busy); status != http.StatusConflict || typ != "idempotency_error" || code != "idempotency_key_in_use" {
		t.Fatalf("while in progress = %d %v, want 409 idempotency_error idempotency_key_in_use", status, busy)
	}
	if st := <-done; st != http.StatusOK {
		t.Fatalf("the first request under k3 = %d, want 200", st)
	}
}
