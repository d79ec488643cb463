package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/poll"
)

// otlpReceiver is an OTLP/HTTP trace endpoint that keeps what it receives.
type otlpReceiver struct {
	mu      sync.Mutex
	service []string // service.name of each resource received
	spans   []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if req.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				r.service = append(r.service, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// The binary exports a record's trace over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT
// is set, and flushes it on SIGTERM after the drain: the batch delay is set
// far beyond the test, so the spans arrive only through that flush.
func TestTracesExportedOnShutdown(t *testing.T) {
	t.Parallel()
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	e := newEnv(t)
	// The process's environment, not the test binary's: the tests beside
	// this one start processes too.
	e.extra = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_BSP_SCHEDULE_DELAY=3600000"}
	e.runOK("migrate")

	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-traced", CustomerID: "cus-1", TotalAmount: 500, Currency: "EUR", ConfirmedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	v, err := wire.Encode(evt)
	if err != nil {
		t.Fatal(err)
	}
	e.produce([]kafkago.Message{{Key: []byte(evt.OrderID), Value: v,
		Headers: []kafkago.Header{{Key: "traceparent", Value: []byte("00-" + traceID + "-" + parentID + "-01")}}}})
	p := e.start("run")
	poll.Until(t, "the invoice", 2*time.Minute, func() bool { return e.invoiceCount() == 1 })
	e.stop(p)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.service) == 0 || rcv.service[0] != "billing" {
		t.Errorf("service.name = %v, want billing", rcv.service)
	}
	var consumer *tracepb.Span
	kinds := map[tracepb.Span_SpanKind]int{}
	for _, s := range rcv.spans {
		if got := hex.EncodeToString(s.GetTraceId()); got != traceID {
			t.Errorf("span %q in trace %s, want %s", s.GetName(), got, traceID)
		}
		kinds[s.GetKind()]++
		if s.GetKind() == tracepb.Span_SPAN_KIND_CONSUMER {
			consumer = s
		}
	}
	if consumer == nil || hex.EncodeToString(consumer.GetParentSpanId()) != parentID {
		t.Fatalf("spans %v: want a consumer span under %s", rcv.spans, parentID)
	}
	// The gateway call, the reserve batch and the settle statement at least.
	if kinds[tracepb.Span_SPAN_KIND_CONSUMER] != 1 || kinds[tracepb.Span_SPAN_KIND_CLIENT] < 3 {
		t.Errorf("span kinds %v: want one consumer span and at least 3 client spans", kinds)
	}
	calls := e.gw.Calls()
	if len(calls) != 1 || len(calls[0].TraceParent) != 55 {
		t.Fatalf("gateway calls %+v, want one with a traceparent", calls)
	}
	sent := calls[0].TraceParent[36:52]
	var found bool
	for _, s := range rcv.spans {
		found = found || (hex.EncodeToString(s.GetSpanId()) == sent && s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT &&
			string(s.GetParentSpanId()) == string(consumer.GetSpanId()))
	}
	if !found {
		t.Errorf("the gateway's traceparent %q names no client span under the consumer span", calls[0].TraceParent)
	}
}
