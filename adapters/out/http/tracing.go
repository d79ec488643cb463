package httpgateway

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// WithTracerProvider makes the Client record each gateway request as an
// HTTP client span through tp, and send that span's W3C traceparent. Without
// it, or with a nil tp, the request carries the traceparent of the caller's
// context as it is (Client.post), and otelhttp is left out: even over a
// no-op provider it clones each request, wraps its body and builds its
// attributes, work with nothing to show for it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tp = tp }
}

// traced wraps rt so that every request is a client span and carries its
// W3C trace context (docs/interface.md §3); with a nil tp it returns rt. The propagator and the meter provider
// are given rather than taken from otel's globals, which billing never sets:
// the global propagator would inject nothing, and the gateway's metrics are
// billing_payment_* already. The span's url.full has no userinfo (otelhttp
// strips it), so the gateway password stays out of exported spans.
func traced(rt http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	if tp == nil {
		return rt
	}
	if rt == nil {
		rt = http.DefaultTransport
	}
	return tracedTransport{base: rt, Transport: otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(spanName),
	)}
}

// spanName is the request's method and route (Request.Route): its path
// without the ids in it, so that span names stay a short list.
func spanName(_ string, r *http.Request) string {
	route, _ := r.Context().Value(routeKey{}).(string)
	if route == "" {
		route = "/"
	}
	return r.Method + " " + route
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
