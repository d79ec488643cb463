package app

import (
	"testing"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestPendingPastHalfTheKeyTTLIsHeld: an invoice whose
// key was first sent more than half of BILLING_GATEWAY_KEY_TTL ago is no
// longer resumed by the service: the gateway may have forgotten a charge
// made under it, so only a person can tell. The completer holds it instead
// of sending the key again.
func TestPendingPastHalfTheKeyTTLIsHeld(t *testing.T) {
	t.Parallel()
	ctx := pgtest.Context(t)
	pool, dsn := pgtest.NewDB(t)
	gw := gatewaystub.New(gatewaystub.Options{})
	h := newHarnessOn(t, gw, pool, dsn, func(c *config.Config) {
		c.PendingResumeAfter = time.Minute
		c.GatewayKeyTTL = 2 * time.Hour
	})
	// Nothing of the service runs while the invoices are made: a completer
	// pass of the first start that ran after the UPDATE below would claim
	// ord-young, and the shutdown would leave it claimed for a back-off
	// longer than the wait.
	h.shutdown()
	old, _ := event(t, "ord-old", "cus-1", 990)
	young, _ := event(t, "ord-young", "cus-1", 990)
	for _, evt := range []order.OrderConfirmedEvent{old, young} {
		if _, err := h.store.Reserve(ctx, order.Invoice{OrderID: evt.OrderID, EventID: evt.EventID, CustomerID: evt.CustomerID,
			Amount: evt.TotalAmount, Currency: evt.Currency, Status: order.StatusPending}, h.cfg.KafkaGroupID,
			order.AttemptTerms{Life: time.Microsecond}); err != nil {
			t.Fatal(err)
		}
	}
	// Their attempts ended at once (Life 1µs): the pods that sent them are
	// long gone. ord-old's key was first sent 61 minutes ago (past half of 2h),
	// ord-young's 59 minutes ago: both are due for the completer.
	if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - CASE order_id WHEN 'ord-old' THEN interval '61 minutes' ELSE interval '59 minutes' END,
		key_sent_at = now() - CASE order_id WHEN 'ord-old' THEN interval '61 minutes' ELSE interval '59 minutes' END`); err != nil {
		t.Fatal(err)
	}
	h.start() // the completer's first pass runs at start
	h.waitInvoice("ord-young", order.StatusCharged)
	inv := h.waitInvoice("ord-old", order.StatusHeld)
	if inv.EventID != old.EventID {
		t.Errorf("held invoice key %s, want %s", inv.EventID, old.EventID)
	}
	for _, c := range gw.Calls() {
		if c.OrderID == "ord-old" {
			t.Errorf("the gateway got %s's key past half its TTL: %+v", c.OrderID, c)
		}
	}
}
