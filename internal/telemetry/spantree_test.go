package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/adapters/in/kafka/wire"
	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/telemetry"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
)

const (
	headerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	headerSpanID  = "00f067aa0ba902b7"
)

// A record carrying a traceparent goes through the real handler, the
// billing service, the Postgres store and the gateway client to the stub,
// and leaves one trace: the record's consumer span under the header's span,
// the gateway call as a client span under it whose traceparent is the one
// the stub received, a span for the reserve batch and one for the settle
// statement; and the gateway client's log line carries the trace.
func TestSpanTreeOfOneRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) })

	_, dsn := pgtest.NewDB(t)
	pool, err := postgres.NewPool(ctx, dsn, 2, postgres.WithTracerProvider(tp))
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(pool.Close)
	stub := gatewaystub.New(gatewaystub.Options{})
	base := stub.StartTest(t)
	var logs bytes.Buffer
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	gw, err := httpgateway.NewClient(base, 5*time.Second, httpgateway.WithTracerProvider(tp), httpgateway.WithLogger(log))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(gw.CloseIdleConnections)
	h := kafkain.NewOrderConfirmedHandler(order.NewBillingService(postgres.NewStore(pool), gw, "billing"), "USD",
		kafkain.WithTracerProvider(tp))

	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-trace-1", CustomerID: "cus-1", TotalAmount: 12990, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	value, err := wire.Encode(evt)
	if err != nil {
		t.Fatal(err)
	}
	msg := kafkain.Record{Topic: "orders", Partition: 1, Offset: 42, Key: []byte(evt.OrderID), Value: value,
		Headers: []kafkain.Header{{Key: "traceparent", Value: []byte("00-" + headerTraceID + "-" + headerSpanID + "-01")}}}
	outcome, err := h.Handle(ctx, msg)
	if err != nil || outcome != order.OutcomeCharged {
		t.Fatalf("Handle = %q, %v; want charged", outcome, err)
	}

	spans := exp.GetSpans()
	t.Logf("spans: %v", names(spans))
	var consumer, client tracetest.SpanStub
	var db []tracetest.SpanStub
	for _, s := range spans {
		if got := s.SpanContext.TraceID().String(); got != headerTraceID {
			t.Errorf("span %q in trace %s, want the header's %s", s.Name, got, headerTraceID)
		}
		switch s.SpanKind {
		case trace.SpanKindConsumer:
			if consumer.Name != "" {
				t.Errorf("second consumer span %q", s.Name)
			}
			consumer = s
		case trace.SpanKindClient:
			if attr(s, "db.system.name") == "postgresql" {
				db = append(db, s)
				continue
			}
			if client.Name != "" {
				t.Errorf("second HTTP client span %q", s.Name)
			}
			client = s
		default:
			t.Errorf("unexpected %s span %q", s.SpanKind, s.Name)
		}
	}
	if consumer.Name != "process orders" {
		t.Fatalf("consumer span = %q, want process orders; spans: %v", consumer.Name, names(spans))
	}
	if !consumer.Parent.IsRemote() || consumer.Parent.SpanID().String() != headerSpanID {
		t.Errorf("consumer span's parent = %s (remote %v), want the header's span %s", consumer.Parent.SpanID(), consumer.Parent.IsRemote(), headerSpanID)
	}
	if attr(consumer, "billing.outcome") != "charged" || attr(consumer, "messaging.kafka.offset") != "42" {
		t.Errorf("consumer span attributes = %v", consumer.Attributes)
	}
	if client.Name != "POST /charges" || client.Parent.SpanID() != consumer.SpanContext.SpanID() {
		t.Errorf("client span %q under %s, want POST /charges under the consumer span %s", client.Name, client.Parent.SpanID(), consumer.SpanContext.SpanID())
	}
	calls := stub.Calls()
	if len(calls) != 1 {
		t.Fatalf("stub saw %d calls, want 1", len(calls))
	}
	if want := "00-" + headerTraceID + "-" + client.SpanContext.SpanID().String() + "-01"; calls[0].TraceParent != want {
		t.Errorf("stub received traceparent %q, want the client span's %q", calls[0].TraceParent, want)
	}

	// The trace reads as billing's steps: the reserve, the charge, the
	// settle, each named after the step (and its db.query.summary), in
	// that order under the record's span.
	for _, s := range db {
		if s.Parent.SpanID() != consumer.SpanContext.SpanID() {
			t.Errorf("db span %q under %s, want the consumer span", s.Name, s.Parent.SpanID())
		}
		text := attr(s, "db.query.text")
		for _, secret := range []string{evt.OrderID, evt.EventID.String(), dsn} {
			if strings.Contains(text, secret) {
				t.Errorf("db span %q text %q holds an argument or the DSN", s.Name, text)
			}
		}
		if got := attr(s, "db.query.summary"); got != s.Name {
			t.Errorf("db span %q: db.query.summary %q, want its name", s.Name, got)
		}
		switch {
		case s.Name == "reserve invoice" && strings.Contains(text, "processed_event") && strings.Contains(text, "invoice"):
		case s.Name == "settle invoice" && strings.Contains(text, "UPDATE invoice"):
		default:
			t.Errorf("db span %q with text %q: want reserve invoice (processed_event, invoice) or settle invoice (UPDATE invoice)", s.Name, text)
		}
	}
	var order []string
	for _, s := range spans {
		if s.Parent.SpanID() == consumer.SpanContext.SpanID() {
			order = append(order, s.Name)
		}
	}
	if want := []string{"reserve invoice", "POST /charges", "settle invoice"}; !slices.Equal(order, want) {
		t.Errorf("spans under %q: %q, want %q", consumer.Name, order, want)
	}

	var line map[string]any
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "payment gateway request") {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
		}
	}
	if line["trace_id"] != headerTraceID || line["span_id"] != consumer.SpanContext.SpanID().String() {
		t.Errorf("gateway log line trace_id %v span_id %v, want %s and the consumer span's %s", line["trace_id"], line["span_id"], headerTraceID, consumer.SpanContext.SpanID())
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.SpanKind.String() + " " + s.Name
	}
	return out
}
