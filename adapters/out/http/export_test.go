package httpgateway

import (
	"net/http"

	"github.com/sony/gobreaker/v2"
)

// Options and methods only the tests use: the service builds its Client
// with its own transport and the default breaker.

// WithHTTPClient makes the Client send through hc instead of a client of its
// own (WithIdleConns and WithTLSConfig then have no effect, and the bound
// on reply headers is hc's transport's MaxResponseHeaderBytes: set it to
// MaxReplyHeaderBytes). The Client uses a copy of hc that does not follow
// redirects: a redirected POST may become a GET, and a charge must never be
// re-sent anywhere but the configured endpoint.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) { o.hc = hc }
}

// WithBreaker sets the circuit breaker's thresholds; zero fields keep their
// defaults.
func WithBreaker(s BreakerSettings) Option {
	return func(o *options) { o.breaker = s }
}

// Healthy reports whether the breaker lets calls through (it is closed, or
// half-open and probing). False means the gateway is treated as down.
func (c *Caller) Healthy() bool { return c.breaker.State() != gobreaker.StateOpen }
