package order_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
)

func TestGatewayCode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"card_declined":          "card_declined",
		"idempotency_key_reused": "idempotency_key_reused",
		"A.b-9_":                 "A.b-9_",
		strings.Repeat("x", 64):  strings.Repeat("x", 64),
		strings.Repeat("x", 65):  "",
		"":                       "",
		"two words":              "",
		"a\nb":                   "",
		"é":                      "",
		"a\x00":                  "",
		"Authorization:Basic":    "",
	} {
		if got := order.GatewayCode(in); got != want {
			t.Errorf("GatewayCode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestValidChargeID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"ch_1":                   true,
		"pi_3Mt:x/y z~":          true,
		strings.Repeat("c", 255): true,
		strings.Repeat("c", 256): false,
		"":                       false,
		"ch\x00":                 false,
		"ch\x1b[31m":             false,
		"ch\x7f":                 false,
		"ch_é":                   false,
		"ch_\xff":                false,
		"ch\r\nX-Injected: 1":    false,
	} {
		if got := order.ValidChargeID(in); got != want {
			t.Errorf("ValidChargeID(%q) = %v, want %v", in, got, want)
		}
	}
}

// idGateway charges every request and answers with its charge id.
type idGateway struct{ id string }

func (g idGateway) Charge(context.Context, order.ChargeRequest) (order.ChargeResult, error) {
	return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: g.id}, nil
}

// A gateway adapter that let through a charge id no invoice may keep costs
// the invoice its charge id, never the charge: the event is charged.
func TestChargeIDAnInvoiceCannotKeepIsDropped(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"ch\x00", strings.Repeat("c", 300), "ch_\xff", "ch_ok"} {
		ledger := ledgertest.NewMem()
		svc := order.NewBillingService(ledger, idGateway{id}, "g")
		got, err := svc.Bill(context.Background(), order.OrderConfirmedEvent{EventID: uuid.Must(uuid.NewV7()),
			EventType: order.EventTypeOrderConfirmed, OrderID: "A", CustomerID: "cus-A", TotalAmount: 100, Currency: "EUR"})
		if err != nil || got != order.OutcomeCharged {
			t.Fatalf("Bill with charge id %.20q = %q, %v; want charged", id, got, err)
		}
		want := ""
		if order.ValidChargeID(id) {
			want = id
		}
		if inv, _ := ledger.Invoice("A"); inv.Status != order.StatusCharged || inv.ChargeID != want {
			t.Errorf("charge id %.20q: invoice %s with charge id %.20q, want charged with %q", id, inv.Status, inv.ChargeID, want)
		}
	}
}
