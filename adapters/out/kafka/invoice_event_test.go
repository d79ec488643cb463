package kafkapub_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	kafkapub "github.com/acme/billing/adapters/out/kafka"
	"github.com/acme/billing/core/order"
)

// TestEncodeInvoiceEvent is docs/interface.md §9's record value.
func TestEncodeInvoiceEvent(t *testing.T) {
	t.Parallel()
	key := uuid.Must(uuid.FromString("0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"))
	at := time.Date(2026, 12, 2, 10, 0, 1, 250_000_000, time.FixedZone("CET", 3600))
	base := order.InvoiceEvent{OrderID: "ord-123", CustomerID: "cus-9", Amount: 12990, Currency: "EUR", IdempotencyKey: key, OccurredAt: at,
		ChargeID: "ch_1", Reason: "400 Bad Request:\n  amount\ttoo large " + strings.Repeat("x", 300)}
	for _, tc := range []struct {
		status     order.InvoiceStatus
		wantType   string
		wantCharge bool
		wantReason bool
	}{
		{order.StatusCharged, "InvoiceCharged", true, false},
		{order.StatusDeclined, "InvoiceDeclined", false, false},
		{order.StatusRejected, "InvoiceRejected", false, true},
		{order.StatusHeld, "InvoiceHeld", false, true},
	} {
		e := base
		e.Status = tc.status
		e.EventID = order.InvoiceEventID(e.OrderID, key, tc.status, 0)
		raw, err := kafkapub.EncodeInvoiceEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got["event_id"] != e.EventID.String() || got["event_type"] != tc.wantType || got["occurred_at"] != "2026-12-02T09:00:01.250Z" ||
			got["order_id"] != "ord-123" || got["customer_id"] != "cus-9" || got["amount"] != 12990.0 || got["currency"] != "EUR" ||
			got["idempotency_key"] != key.String() {
			t.Errorf("%s: %s", tc.status, raw)
		}
		if _, ok := got["charge_id"]; ok != tc.wantCharge {
			t.Errorf("%s: charge_id present %v, want %v: %s", tc.status, ok, tc.wantCharge, raw)
		}
		reason, ok := got["reason"].(string)
		if ok != tc.wantReason || (ok && (len(reason) > 256 || strings.ContainsAny(reason, "\n\t") || !strings.HasPrefix(reason, "400 Bad Request: amount too large"))) {
			t.Errorf("%s: reason %q, want one line of at most 256 bytes: %v", tc.status, reason, tc.wantReason)
		}
	}
	if _, err := kafkapub.EncodeInvoiceEvent(order.InvoiceEvent{Status: order.StatusPending}); err == nil {
		t.Error("a pending invoice's event encoded")
	}
}
