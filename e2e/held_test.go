package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestHeldInvoiceResolvedByAPerson: the gateway answers 422 for two orders
// (their keys used with another body: money may have moved). The built
// binary holds both invoices, dead-letters their records, counts them in
// billing_invoices_held, and never sends their keys again. A person then
// runs `billing invoice resolve` while the service runs: --charged records
// what the gateway's records show; --resume gives the other one more
// automatic attempt, which the pending completer makes once the gateway
// accepts the key. A second resolve of a settled invoice is refused.
func TestHeldInvoiceResolvedByAPerson(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var refuse atomic.Bool
	refuse.Store(true)
	e.gw.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		if refuse.Load() && strings.HasPrefix(c.OrderID, "ord-held-") {
			return gatewaystub.Fault{Status: http.StatusUnprocessableEntity}
		}
		return gatewaystub.Fault{}
	})
	// The completer passes every second, so the gauge and the resume are
	// seen soon.
	e.extra = append(e.extra, "BILLING_PENDING_RESUME_AFTER=4s")
	p := e.start("run")
	metricsURL := "http://" + httpAddr(t, p) + "/metrics"

	var msgs []kafkago.Message
	for _, id := range []string{"ord-held-1", "ord-held-2", "ord-ok"} {
		evt, err := order.NewOrderConfirmedEvent(order.Order{ID: id, CustomerID: "cus-" + id, TotalAmount: 4200, Currency: "EUR", ConfirmedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		v, err := wire.Encode(evt)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafkago.Message{Key: []byte(id), Value: v})
	}
	e.produce(msgs)
	poll.Until(t, "both 422 orders held, the other charged", 60*time.Second, func() bool {
		invs := e.invoices()
		return invs["ord-held-1"].Status == order.StatusHeld && invs["ord-held-2"].Status == order.StatusHeld &&
			invs["ord-ok"].Status == order.StatusCharged
	})
	poll.Until(t, "billing_invoices_held 2", 30*time.Second, func() bool { return scrape(metricsURL)["billing_invoices_held"] == 2 })
	if got := len(kafkatest.ReadAll(t, e.brokers, e.dlq, 2, 30*time.Second)); got != 2 {
		t.Errorf("DLQ records = %d, want the two held orders'", got)
	}
	calls := len(e.gw.Calls())

	// The person names the key whose records they read (billing invoice
	// show prints it) and themselves.
	keyOf := func(orderID string) string { return e.invoices()[orderID].EventID.String() }
	out := e.runOK("invoice", "resolve", "ord-held-1", "--charged", "ch_found_by_a_person",
		"--expect-key", keyOf("ord-held-1"), "--by", "e2e-oncall")
	if !strings.Contains(out, "before: order ord-held-1 held") || !strings.Contains(out, "after:  order ord-held-1 charged") ||
		!strings.Contains(out, "charge ch_found_by_a_person") {
		t.Errorf("resolve --charged printed:\n%s\nwant the invoice held before and charged after", out)
	}
	if inv := e.invoices()["ord-held-1"]; inv.Status != order.StatusCharged || inv.ChargeID != "ch_found_by_a_person" {
		t.Errorf("ord-held-1 = %+v, want charged with the person's charge id", inv)
	}

	refuse.Store(false) // the gateway's records are fixed: the key may be sent again
	out = e.runOK("invoice", "resolve", "--resume", "ord-held-2", "--expect-key", keyOf("ord-held-2"), "--by", "e2e-oncall")
	if !strings.Contains(out, "after:  order ord-held-2 pending") {
		t.Errorf("resolve --resume printed:\n%s\nwant the invoice pending after", out)
	}
	poll.Until(t, "the completer to charge ord-held-2", 60*time.Second, func() bool {
		return e.invoices()["ord-held-2"].Status == order.StatusCharged
	})
	poll.Until(t, "billing_invoices_held 0", 30*time.Second, func() bool { return scrape(metricsURL)["billing_invoices_held"] == 0 })

	// Nothing sent a held key while it was held: the only calls since are
	// the one the resume allowed.
	for _, c := range e.gw.Calls()[calls:] {
		if c.OrderID != "ord-held-2" {
			t.Errorf("gateway call for %s after both were held", c.OrderID)
		}
	}
	if cs := e.gw.ChargesForOrder("ord-held-2"); len(cs) != 1 {
		t.Errorf("charges of ord-held-2 = %d, want 1", len(cs))
	}

	// An invoice that is not held is not a person's to change.
	cmd := exec.CommandContext(context.Background(), binary, "invoice", "resolve", "ord-ok", "--rejected",
		"--expect-key", keyOf("ord-ok"), "--by", "e2e-oncall")
	cmd.Env = e.environ()
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "neither held nor pending") {
		t.Errorf("resolve of a charged invoice = %v:\n%s\nwant a refusal saying it is neither held nor pending", err, b)
	}
	e.stop(p)
}
