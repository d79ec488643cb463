package app

import (
	"testing"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/poll"
)

// BILLING_PAYMENT_PROVIDER=stripe bills through Stripe's PaymentIntents
// API (here the stub's): the PaymentIntent's id is the invoice's charge id,
// a decline is declined, a second event of the order is a duplicate, and
// BILLING_PAYMENT_BASE_URL is not needed.
func TestStripeProvider(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	h := newHarness(t, gw, func(c *config.Config) {
		c.PaymentProvider, c.StripeAPIKey, c.StripeAPIBase = config.ProviderStripe, gatewaystub.DefaultStripeKey, c.PaymentBaseURL
		c.PaymentBaseURL = ""
	})
	_, m1 := event(t, "ord-s1", "cus_1", 1299)
	_, m2 := event(t, "ord-s1", "cus_1", 1299)
	_, m3 := event(t, "ord-s2", "declined-7", 500)
	h.send(m1, m2, m3)

	inv := h.waitInvoice("ord-s1", order.StatusCharged)
	h.waitInvoice("ord-s2", order.StatusDeclined)
	charges := gw.ChargesForOrder("ord-s1")
	if len(charges) != 1 || inv.ChargeID != charges[0].ID || inv.ChargeID[:3] != "pi_" {
		t.Errorf("invoice charge id %q, Stripe's PaymentIntents %+v: want one pi_… recorded", inv.ChargeID, charges)
	}
	poll.Until(t, "the duplicate counted", 10*time.Second, func() bool { return h.outcome("duplicate_order") == 1 })
	posts := 0
	for _, c := range gw.Calls() {
		if c.Route == "POST "+gatewaystub.StripePaymentIntentsPath {
			posts++
		}
	}
	if posts != 2 {
		t.Errorf("%d PaymentIntents asked for, want 2 (one per order)", posts)
	}
}
