package payment

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// WithTracerProvider makes the Client record each gateway request as an
// HTTP client span through tp (default, and when tp is nil: a no-op
// provider). Either way the
// request carries the W3C traceparent of the span in its context: the
// client span's when tracing is on, the record's own otherwise.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// traced wraps rt so that every request is a client span and carries the
// W3C trace context (CONTRACT.md §3). The propagator and the meter provider
// are given rather than taken from otel's globals, which billing never sets:
// the global propagator would inject nothing, and the gateway's metrics are
// billing_payment_* already. The span's url.full has no userinfo (otelhttp
// strips it), so the gateway password stays out of exported spans.
func traced(rt http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return tracedTransport{base: rt, Transport: otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " /charges" }),
	)}
}

// tracedTransport is otelhttp's Transport with CloseIdleConnections passed
// on to the transport it wraps: otelhttp does not forward it, and without it
// Client.CloseIdleConnections would leave the idle connections (and their
// goroutines) open.
type tracedTransport struct {
	*otelhttp.Transport
	base http.RoundTripper
}

func (t tracedTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
