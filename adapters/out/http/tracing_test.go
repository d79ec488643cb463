package httpgateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// remoteParent returns a context holding traceparent as a remote span
// context, as the Kafka handler's context holds a record's.
func remoteParent(t *testing.T, traceparent string) context.Context {
	t.Helper()
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatalf("traceparent %q does not parse", traceparent)
	}
	return ctx
}

// With a tracer provider each charge is an HTTP client span, the child of
// the span in the caller's context, and the request carries that client
// span's traceparent; the span shows the endpoint without its password.
func TestChargeIsAClientSpan(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charge_id":"ch_1","status":"succeeded"}`))
	})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	withUser := strings.Replace(base, "http://", "http://svc:s3cret@", 1)
	c, _ := newClient(t, withUser, 5*time.Second, WithTracerProvider(tp))

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := c.Charge(remoteParent(t, parent), chargeReq(t, "ord-1", "cus-1")); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	sent := <-got
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	sp := spans[0]
	if sp.SpanKind() != trace.SpanKindClient || sp.Name() != "POST /charges" {
		t.Errorf("span = %s %q, want a client span POST /charges", sp.SpanKind(), sp.Name())
	}
	if got, want := sp.Parent().SpanID().String(), "00f067aa0ba902b7"; got != want {
		t.Errorf("parent span id = %s, want %s", got, want)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + sp.SpanContext().SpanID().String() + "-01"; sent != want {
		t.Errorf("traceparent sent = %q, want the client span's %q", sent, want)
	}
	for _, kv := range sp.Attributes() {
		if strings.Contains(kv.Value.String(), "s3cret") {
			t.Errorf("span attribute %s = %q holds the password", kv.Key, kv.Value.String())
		}
	}
}
