package config

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// BILLING_PAYMENT_PROVIDER (docs/interface.md §2, §6): generic needs
// BILLING_PAYMENT_BASE_URL, stripe needs BILLING_STRIPE_API_KEY and not the
// base URL; each is checked only for its provider.
func TestStripeProvider(t *testing.T) {
	const key = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"
	stripe := func(t *testing.T) {
		t.Helper()
		setBase(t)
		unsetenv(t, "BILLING_PAYMENT_BASE_URL")
		t.Setenv("BILLING_PAYMENT_PROVIDER", "Stripe")
		t.Setenv("BILLING_STRIPE_API_KEY", key)
	}
	stripe(t)
	c, err := Load()
	if err != nil {
		t.Fatalf("stripe without BILLING_PAYMENT_BASE_URL: %v", err)
	}
	if c.PaymentProvider != ProviderStripe || c.StripeAPIBase != "https://api.stripe.com" || c.StripeAPIKey.Reveal() != key {
		t.Errorf("provider %q, base %q", c.PaymentProvider, c.StripeAPIBase)
	}
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("configuration", slog.Any("config", c))
	if strings.Contains(buf.String(), key) || strings.Contains(c.StripeAPIKey.String(), key) {
		t.Errorf("the Stripe key printed: %s", buf.String())
	}

	for _, tc := range []struct{ name, value, wantVar string }{
		{"BILLING_STRIPE_API_KEY", "", "BILLING_STRIPE_API_KEY"},
		{"BILLING_STRIPE_API_KEY", "pk_test_TYooMQauvdEDq54NiTphI7jx", "BILLING_STRIPE_API_KEY"}, // publishable: cannot charge
		{"BILLING_STRIPE_API_KEY", "sk_test_with space", "BILLING_STRIPE_API_KEY"},
		{"BILLING_STRIPE_API_KEY", "sk_" + strings.Repeat("x", 300), "BILLING_STRIPE_API_KEY"},
		{"BILLING_STRIPE_API_BASE", "http://api.stripe.com", "BILLING_STRIPE_API_BASE"}, // the key in clear
		{"BILLING_STRIPE_API_BASE", "https://user:pw@api.stripe.com", "BILLING_STRIPE_API_BASE"},
		{"BILLING_STRIPE_API_BASE", "api.stripe.com", "BILLING_STRIPE_API_BASE"},
		{"BILLING_PAYMENT_PROVIDER", "paypal", "BILLING_PAYMENT_PROVIDER"},
	} {
		t.Run(tc.name+"="+tc.value[:min(len(tc.value), 24)], func(t *testing.T) {
			stripe(t)
			if tc.value == "" {
				unsetenv(t, tc.name)
			} else {
				t.Setenv(tc.name, tc.value)
			}
			_, err := Load()
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != tc.wantVar {
				t.Fatalf("Load() = %v, want an error naming %s", err, tc.wantVar)
			}
			if (tc.name == "BILLING_STRIPE_API_KEY" && tc.value != "" && strings.Contains(err.Error(), tc.value)) || strings.Contains(err.Error(), ":pw@") {
				t.Errorf("error quotes the value: %v", err)
			}
		})
	}
	// stripe-mock listens on a loopback address over plain http.
	for _, base := range []string{"http://127.0.0.1:12111", "http://localhost:12111", "http://[::1]:12111", "https://stripe.internal:8443/v1"} {
		stripe(t)
		t.Setenv("BILLING_STRIPE_API_BASE", base)
		if _, err := Load(); err != nil {
			t.Errorf("BILLING_STRIPE_API_BASE=%s: %v", base, err)
		}
	}
	// The generic provider needs its URL, and ignores Stripe's variables.
	setBase(t)
	t.Setenv("BILLING_STRIPE_API_KEY", "pk_not_read")
	if _, err := Load(); err != nil {
		t.Errorf("generic with a Stripe key set: %v", err)
	}
	unsetenv(t, "BILLING_PAYMENT_BASE_URL")
	var ce *Error
	if _, err := Load(); !errors.As(err, &ce) || ce.Var != "BILLING_PAYMENT_BASE_URL" || !strings.Contains(err.Error(), "generic") {
		t.Errorf("generic without BILLING_PAYMENT_BASE_URL: %v", err)
	}
}
