package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// invoiceEvent is the part of a §9 invoice event these tests read.
type invoiceEvent struct {
	EventType string  `json:"event_type"`
	OrderID   string  `json:"order_id"`
	ChargeID  *string `json:"charge_id"`
	Reason    string  `json:"reason"`
}

func readInvoiceEvents(t *testing.T, h *harness, n int) []invoiceEvent {
	t.Helper()
	var out []invoiceEvent
	for _, r := range kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaInvoiceTopic, n, 20*time.Second) {
		var v invoiceEvent
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("invoice event %q: %v", r.Value, err)
		}
		out = append(out, v)
	}
	return out
}

// The gateway's free text (docs/interface.md §6, issue 30 point 2) — here a
// message echoing the request's headers, our Authorization header first —
// reaches none of x-error, the log, invoice.reason or the invoice event's
// reason; the status and the gateway's error code (a short token) do.
func TestGatewayFreeTextStaysInTheAdapter(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	gw.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
		return gatewaystub.Fault{Status: http.StatusBadRequest, EchoRequest: true}
	})
	var logs syncbuf.Buffer
	pool, dsn := pgtest.NewDB(t)
	h := newHarnessLogged(t, gw, pool, dsn, func(c *config.Config) { c.PublishEvents = true }, &logs)
	_, m := event(t, "ord-echoed", "cus-1", 100)
	h.send(m)

	const echoed = "request headers:" // the stub's echo starts so (gatewaystub.Fault.EchoRequest)
	dlq := kafkatest.ReadAll(t, h.brokers, h.cfg.KafkaDLQTopic, 1, 20*time.Second)
	xerr := headers(dlq[0])["x-error"]
	if strings.Contains(xerr, echoed) || strings.Contains(xerr, "application/json") {
		t.Errorf("x-error %q holds the gateway's message", xerr)
	}
	if !strings.Contains(xerr, "400") || !strings.Contains(xerr, "injected_fault") {
		t.Errorf("x-error %q: want the status and the gateway's error code", xerr)
	}
	inv := h.waitInvoice("ord-echoed", order.StatusRejected)
	if strings.Contains(inv.Reason, echoed) || !strings.Contains(inv.Reason, "400") {
		t.Errorf("invoice reason %q: want the status, not the gateway's message", inv.Reason)
	}
	evs := readInvoiceEvents(t, h, 1)
	if evs[0].EventType != "InvoiceRejected" || strings.Contains(evs[0].Reason, echoed) || !strings.Contains(evs[0].Reason, "400") {
		t.Errorf("invoice event %+v: want InvoiceRejected whose reason has the status, not the gateway's message", evs[0])
	}
	if strings.Contains(logs.String(), echoed) {
		t.Error("the log holds the gateway's message")
	}
}

// chargeIDGateway answers every charge 201 "succeeded" with the charge id
// (a JSON string literal, escapes and raw bytes as given) that ids maps
// the order to, and counts the calls.
func chargeIDGateway(t *testing.T, ids map[string]string) (url string, calls *atomic.Int32) {
	t.Helper()
	calls = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var b struct {
			OrderID string `json:"order_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge_id":"`+ids[b.OrderID]+`","status":"succeeded"}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, calls
}

// A charge id no invoice may keep (docs/interface.md §6, issue 30 point 3) in a
// success: the invoice is still charged, without an id, the event is final
// at once (no retry, no DLQ: the money moved), the invoice event has no
// charge id, and billing_gateway_protocol_errors_total counts it. A NUL used
// to fail the settle (SQLSTATE 22021) after the charge went through, and
// send the record to the DLQ with the invoice left pending.
func TestBadChargeIDsStillCharge(t *testing.T) {
	t.Parallel()
	ids := map[string]string{
		"ord-nul":     `ch_\u0000x`,
		"ord-60k":     "ch_" + strings.Repeat("A", 60<<10),
		"ord-control": `ch_\u001b[31mred\r\nX-Injected: 1`,
		"ord-utf8":    "ch_\xff\xfe\xc3",
		"ord-good":    "ch_good-1",
	}
	url, _ := chargeIDGateway(t, ids)
	h := newHarness(t, nil, func(c *config.Config) { c.PaymentBaseURL = url; c.PublishEvents = true })
	var msgs []kafkago.Message
	for id := range ids {
		_, m := event(t, id, "cus-1", 100)
		msgs = append(msgs, m)
	}
	h.send(msgs...)
	for id := range ids {
		inv := h.waitInvoice(id, order.StatusCharged)
		want := ""
		if id == "ord-good" {
			want = "ch_good-1"
		}
		if inv.ChargeID != want {
			t.Errorf("%s: charge id %q, want %q", id, inv.ChargeID, want)
		}
	}
	poll.Until(t, "every event charged", 10*time.Second, func() bool { return h.outcome("charged") == len(ids) })
	if n := h.routed(); n != 0 {
		t.Errorf("%d records routed to a tier or the DLQ, want 0: every charge went through", n)
	}
	for _, ev := range readInvoiceEvents(t, h, len(ids)) {
		if ev.EventType != "InvoiceCharged" || (ev.ChargeID != nil) != (ev.OrderID == "ord-good") {
			t.Errorf("invoice event %+v: want InvoiceCharged, a charge id only for ord-good", ev)
		}
	}
	for kind, want := range map[string]float64{"charge_id_not_printable": 3, "charge_id_too_long": 1} {
		if got := testutil.ToFloat64(h.app.Metrics.GatewayProtocolErrors.WithLabelValues(kind)); got != want {
			t.Errorf("billing_gateway_protocol_errors_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
}

// cuttingGateway serves stub, but cuts the replies of 5 calls in every 100
// (arrivals 0–4, 100–104, …) mid-reply after the stub did the work, as a
// load balancer closing kept-alive connections does: a burst of lost
// replies among successes.
func cuttingGateway(t *testing.T, stub *gatewaystub.Stub) (url string, cut *atomic.Int32) {
	t.Helper()
	var arrivals atomic.Int32
	cut = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrivals.Add(1)%100 >= 5 {
			stub.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		stub.ServeHTTP(rec, r) // the work is done
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		cut.Add(1)
		body := rec.Body.String()
		_, _ = fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			rec.Code, http.StatusText(rec.Code), len(body), body[:len(body)/2])
		_ = bw.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv.URL, cut
}

// pauses counts the pauses a process's log reports.
func pauses(log *syncbuf.Buffer) int {
	return strings.Count(log.String(), "consumption paused: dependency unavailable")
}

// TestLostRepliesAmongSuccessesDoNotPause (docs/interface.md §4, issue 30 point
// 7): a gateway that loses 5% of its replies after doing the work, in
// bursts, at in-flight 64, is working: each lost reply is that event's
// unknown outcome, retried under its key (a tier), and consumption never
// pauses. Every order is charged once.
func TestLostRepliesAmongSuccessesDoNotPause(t *testing.T) {
	t.Parallel()
	const orders = 1000
	stub := gatewaystub.New(gatewaystub.Options{Latency: 2 * time.Millisecond, NoCallLog: true})
	t.Cleanup(stub.Close)
	url, cut := cuttingGateway(t, stub)
	var logs syncbuf.Buffer
	pool, dsn := pgtest.NewDB(t)
	h := newHarnessLogged(t, nil, pool, dsn, func(c *config.Config) {
		c.PaymentBaseURL, c.MaxInFlight, c.LogLevel = url, 64, "info"
	}, &logs)
	msgs := make([]kafkago.Message, 0, orders)
	for i := range orders {
		_, m := event(t, fmt.Sprintf("ord-lossy-%04d", i), "cus-1", 100)
		msgs = append(msgs, m)
	}
	h.send(msgs...)
	poll.Until(t, "every order charged", 90*time.Second, func() bool { return h.outcome("charged") == orders })
	if n := pauses(&logs); n != 0 {
		t.Errorf("consumption paused %d times for %d lost replies among %d charges, want never", n, cut.Load(), orders)
	}
	if cut.Load() < orders/25 {
		t.Errorf("only %d replies cut, want about 5%% of %d (the test's premise)", cut.Load(), orders)
	}
	if n := len(stub.Charges()); n != orders {
		t.Errorf("%d charges at the gateway, want %d: one per order", n, orders)
	}
	if n := h.outcome("dead_lettered"); n != 0 {
		t.Errorf("%d records dead-lettered, want 0", n)
	}
}

// TestGatewayDownPausesAndOneProbeResumes (docs/interface.md §4): a gateway really
// down (connections refused) still pauses consumption within seconds,
// routing nothing; once it is back, one call probes it while consumption is
// still paused, and its success resumes everything: every order billed
// once, one pause in all.
func TestGatewayDownPausesAndOneProbeResumes(t *testing.T) {
	t.Parallel()
	gw := newSwitchedGateway(t)
	var logs syncbuf.Buffer
	pool, dsn := pgtest.NewDB(t)
	h := newHarnessLogged(t, nil, pool, dsn, func(c *config.Config) { c.PaymentBaseURL, c.MaxInFlight = gw.url(), 64 }, &logs)
	poll.Until(t, "/readyz 200 at start", 20*time.Second, func() bool { return h.readyz() == http.StatusOK })
	const orders = 40
	var msgs []kafkago.Message
	for i := range orders {
		_, m := event(t, fmt.Sprintf("ord-down-%02d", i), "cus-1", 100)
		msgs = append(msgs, m)
	}
	h.send(msgs...)
	poll.Until(t, "the pause", 10*time.Second, func() bool { return h.paused() && h.readyz() == http.StatusServiceUnavailable })
	if n := h.routed(); n != 0 {
		t.Fatalf("%d records routed while the gateway refused connections, want 0", n)
	}

	release := gw.stub.Hold()
	var once sync.Once
	t.Cleanup(func() { once.Do(release) })
	gw.up()
	poll.Until(t, "the probe at the gateway", 20*time.Second, func() bool { return gw.stub.Held() == 1 })
	if !h.paused() {
		t.Error("consumption resumed before the probe was answered")
	}
	released := time.Now()
	once.Do(release)
	poll.Until(t, "every order charged", 30*time.Second, func() bool { return h.outcome("charged") == orders })
	poll.Until(t, "/readyz 200 again", 10*time.Second, func() bool { return h.readyz() == http.StatusOK })
	if n := h.routed(); n != 0 {
		t.Errorf("%d records routed, want 0", n)
	}
	if n := pauses(&logs); n != 1 {
		t.Errorf("%d pauses, want 1", n)
	}
	var early []gatewaystub.Call
	for _, c := range gw.stub.Calls() {
		if c.Time.Before(released) {
			early = append(early, c)
		}
	}
	if len(early) != 1 {
		t.Errorf("%d calls reached the gateway before the probe was answered, want the probe alone: %+v", len(early), early)
	}
	for i := range orders {
		if n := len(gw.stub.ChargesForOrder(fmt.Sprintf("ord-down-%02d", i))); n != 1 {
			t.Errorf("ord-down-%02d charged %d times, want 1", i, n)
		}
	}
}
