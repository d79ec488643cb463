package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
)

const (
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID  = "00f067aa0ba902b7"
)

// TraceParent reads a record's traceparent as W3C Trace Context says, now
// through OpenTelemetry's propagator rather than a codec of billing's own.
func TestTraceParent(t *testing.T) {
	t.Parallel()
	valid := "00-" + testTraceID + "-" + testSpanID + "-01"
	tests := []struct {
		name    string
		headers []kafkain.Header
		ok      bool
	}{
		{"spec example", []kafkain.Header{{Key: "traceparent", Value: []byte(valid)}}, true},
		{"future version with more fields", []kafkain.Header{{Key: "traceparent", Value: []byte("cc-" + testTraceID + "-" + testSpanID + "-01-more")}}, true},
		{"last header wins", []kafkain.Header{{Key: "traceparent", Value: []byte("junk")}, {Key: "traceparent", Value: []byte(valid)}}, true},
		{"absent", nil, false},
		{"other case of the name", []kafkain.Header{{Key: "Traceparent", Value: []byte(valid)}}, false},
		{"version ff", []kafkain.Header{{Key: "traceparent", Value: []byte("ff" + valid[2:])}}, false},
		{"upper-case trace id", []kafkain.Header{{Key: "traceparent", Value: []byte("00-" + strings.ToUpper(testTraceID) + "-" + testSpanID + "-01")}}, false},
		{"zero trace id", []kafkain.Header{{Key: "traceparent", Value: []byte("00-" + strings.Repeat("0", 32) + "-" + testSpanID + "-01")}}, false},
		{"v00 trailing data", []kafkain.Header{{Key: "traceparent", Value: []byte(valid + "-x")}}, false},
		{"trailing space", []kafkain.Header{{Key: "traceparent", Value: []byte(valid + " ")}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tp, ok := kafkain.TraceParent(kafkain.Record{Headers: tt.headers})
			if ok != tt.ok {
				t.Fatalf("TraceParent ok = %v, want %v", ok, tt.ok)
			}
			if ok && tp.TraceIDString() != testTraceID {
				t.Errorf("TraceIDString() = %s, want %s", tp.TraceIDString(), testTraceID)
			}
		})
	}
}

type billerFunc func(ctx context.Context, evt order.OrderConfirmedEvent) (order.Outcome, error)

func (f billerFunc) Bill(ctx context.Context, evt order.OrderConfirmedEvent) (order.Outcome, error) {
	return f(ctx, evt)
}

// A record that fails is a consumer span with an error status, and the
// billing call runs inside that span; a record without a traceparent starts
// a trace of its own.
func TestHandleSpanOfAFailure(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	var inside trace.SpanContext
	h := kafkain.NewOrderConfirmedHandler(billerFunc(func(ctx context.Context, _ order.OrderConfirmedEvent) (order.Outcome, error) {
		inside = trace.SpanContextFromContext(ctx)
		return "", &order.TransientError{Op: "test", Err: errors.New("gateway timeout")}
	}), "USD", kafkain.WithTracerProvider(tp))
	msg := kafkain.Record{Topic: "orders", Partition: 2, Offset: 7, Value: validEvent(t)}
	if _, err := h.Handle(context.Background(), msg); err == nil {
		t.Fatal("Handle: nil error, want the biller's")
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	sp := spans[0]
	if sp.SpanKind() != trace.SpanKindConsumer || sp.Name() != "process orders" || sp.Parent().IsValid() {
		t.Errorf("span %s %q parent %v, want a root consumer span process orders", sp.SpanKind(), sp.Name(), sp.Parent())
	}
	if sp.Status().Description != "transient" || len(sp.Events()) == 0 {
		t.Errorf("status %v, %d events; want an error status transient and the error recorded", sp.Status(), len(sp.Events()))
	}
	if inside.SpanID() != sp.SpanContext().SpanID() {
		t.Errorf("Bill ran in span %s, want the record's span %s", inside.SpanID(), sp.SpanContext().SpanID())
	}
}

// validEvent returns the bytes of a valid OrderConfirmed event.
func validEvent(t *testing.T) []byte {
	t.Helper()
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: "ord-1", CustomerID: "cus-1", TotalAmount: 12990, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.Encode(evt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Without a tracer provider no span is started, and the billing call still
// runs in the record's trace, for the gateway call to pass on.
func TestHandleWithoutTracingCarriesTheRecordsTrace(t *testing.T) {
	t.Parallel()
	var inside trace.SpanContext
	h := kafkain.NewOrderConfirmedHandler(billerFunc(func(ctx context.Context, _ order.OrderConfirmedEvent) (order.Outcome, error) {
		inside = trace.SpanContextFromContext(ctx)
		return order.OutcomeCharged, nil
	}), "USD")
	msg := kafkain.Record{Topic: "orders", Value: validEvent(t),
		Headers: []kafkain.Header{{Key: "traceparent", Value: []byte("00-" + testTraceID + "-" + testSpanID + "-01")}}}
	if _, err := h.Handle(context.Background(), msg); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if inside.TraceID().String() != testTraceID || inside.SpanID().String() != testSpanID || !inside.IsRemote() {
		t.Errorf("Bill ran in %v, want the record's remote span context", inside)
	}
}
