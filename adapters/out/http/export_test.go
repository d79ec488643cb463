package httpgateway

import (
	"net/http"

	"github.com/sony/gobreaker/v2"
)

// Options and methods only the tests use: the service builds its Client
// with its own transport and the default breaker.

// WithHTTPClient makes the Client send through hc's Transport
// (http.DefaultTransport when nil) instead of a transport of its own
// (WithIdleConns and WithTLSConfig then have no effect, and the bound on
// reply headers is that transport's MaxResponseHeaderBytes: set it to
// MaxReplyHeaderBytes). Nothing else of hc is used or changed: the Client
// sends without an http.Client (Caller.roundTrip) and follows no redirect.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) {
		o.rt = hc.Transport
		if o.rt == nil {
			o.rt = http.DefaultTransport
		}
	}
}

// WithBreaker sets the circuit breaker's thresholds; zero fields keep their
// defaults.
func WithBreaker(s BreakerSettings) Option {
	return func(o *options) { o.breaker = s }
}

// Healthy reports whether the breaker lets calls through (it is closed, or
// half-open and probing). False means the gateway is treated as down.
func (c *Caller) Healthy() bool { return c.breaker.State() != gobreaker.StateOpen }
