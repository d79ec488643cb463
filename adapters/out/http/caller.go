package httpgateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/propagation"

	"github.com/acme/billing/core/order"
)

// Caller is what every payment adapter shares, whatever protocol it
// speaks (docs/interface.md §6 for Client, Stripe's API for adapters/out/stripe):
// one request bounded by the payment timeout, its bytes bounded
// (MaxReplyHeaderBytes, a body limit), no redirects followed, every
// transport error scrubbed of the service's credentials, a client span and
// the caller's traceparent, the requests counter and latency histogram,
// the protocol errors counter, the circuit breaker (BreakerSettings: the
// credentials refused, a streak of calls that could not connect or timed
// out, nearly every call failing) and the immediate redial of a connection
// that could not be opened. What a reply means is the adapter's (a Judge):
// the Caller only knows whether a reply came, and passes the judge's
// verdict on the provider's health to the breaker.
//
// It is safe for concurrent use; an adapter makes one per provider and
// sends every request of that provider through it, so that the breaker
// sees them all.
type Caller struct {
	scrub   *scrubber // guards the Caller's own text about failed round trips (scrub.go)
	timeout time.Duration
	// rt carries every request: the transport under ownWordsTransport and
	// the tracing one (roundTrip), without an http.Client around it.
	rt       http.RoundTripper
	requests *prometheus.CounterVec
	byStatus [600]prometheus.Counter // requests by a reply's status, 0 no reply (requestsOf)
	duration prometheus.Histogram
	protocol *prometheus.CounterVec // kind
	log      *slog.Logger
	breaker  *gobreaker.CircuitBreaker[struct{}]
	coolDown time.Duration
	redials  int  // attempts of a request whose connections could not be opened
	traced   bool // requests are client spans (WithTracerProvider)
	// quietUntil is the latest time (Unix nanoseconds) until which an
	// unwell provider asked, by Retry-After, to be left alone: the outage
	// the breaker reports carries what is left of it.
	quietUntil atomic.Int64
}

// NewCaller returns a Caller whose requests each time out after timeout.
// secret is the credentials its requests carry (the user info of a base
// URL, an API key as its user name), which the Caller's own text about a
// failed round trip never repeats (scrub.go); nil when none.
func NewCaller(timeout time.Duration, secret *url.Userinfo, opts ...Option) (*Caller, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("payment client: timeout %v, want > 0", timeout)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &Caller{
		scrub:    newScrubber(secret),
		timeout:  timeout,
		requests: o.requests,
		duration: o.duration,
		protocol: o.protocol,
		log:      o.log,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	base := o.rt
	if base == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// One idle connection per event in flight rather than net/http's 2
		// per host (and 100 in all), which would open and close a
		// connection for most charges under load.
		idle := o.idle
		if idle <= 0 {
			idle = DefaultIdleConns
		}
		tr.MaxIdleConnsPerHost, tr.MaxIdleConns = idle, idle
		// h1Transport's bound too; over HTTP/2 (a proxied request, left to
		// net/http) MAX_HEADER_LIST_SIZE: net/http passes it on.
		tr.MaxResponseHeaderBytes = MaxReplyHeaderBytes
		// No Accept-Encoding: gzip added to every request: the replies are
		// a few hundred bytes, and a body read as sent keeps the reply
		// bounds (MaxReplyBytes) on the bytes the provider sends rather
		// than on what a compressed body inflates to. It also spares each
		// request a header map of its own (make bench's profiles).
		tr.DisableCompression = true
		if o.tls != nil {
			tr.TLSClientConfig = o.tls.Clone()
		}
		// tr carries only what h1Transport leaves to net/http (proxied
		// requests); it gives h1Transport its settings.
		base = newH1Transport(tr)
	}
	c.rt = traced(ownWordsTransport{base: base, s: c.scrub}, o.tp)
	c.traced = o.tp != nil
	if c.requests != nil {
		for _, code := range CodeLabels() {
			c.requests.WithLabelValues(code)
		}
		// Each request counts its reply's code: resolved here rather than
		// by label (and strconv) on every request (make bench's profiles).
		c.byStatus[0] = c.requests.WithLabelValues(CodeNoReply)
		for s := 100; s < len(c.byStatus); s++ {
			c.byStatus[s] = c.requests.WithLabelValues(codeLabel(s))
		}
	}
	if c.protocol != nil {
		for _, kind := range ProtocolErrorKinds() {
			c.protocol.WithLabelValues(kind)
		}
	}
	c.breaker, c.coolDown = newBreaker(o.breaker, c.log)
	c.redials = int(o.breaker.ConsecutiveNoReply)
	if c.redials <= 0 {
		c.redials = DefaultConsecutiveNoReply
	}
	return c, nil
}

// CloseIdleConnections closes the idle connections of the Caller's transport.
func (c *Caller) CloseIdleConnections() {
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// Request is one request a Caller sends.
type Request struct {
	// Op is the operation every error of the request starts with
	// ("payment gateway charge").
	Op     string
	Method string
	// URL is sent as it is, user info included (net/http sends it as basic
	// authentication); Shown is the same without user info, the only form
	// that appears in errors and logs.
	URL, Shown string
	// Route names the endpoint in the client span ("/charges",
	// "/v1/customers/{id}"): a path without the ids in it, so that the
	// span names stay a short list.
	Route  string
	Header http.Header
	Body   []byte // nil: none
	// Key and OrderID are logged at debug level with the request ("" when
	// the request has none).
	Key, OrderID string
}

// Judge maps a reply onto what it says of the provider's health and the
// adapter's error for it (nil: the reply is a result the judge kept). It
// reads body, the reply's body, as far as it needs (the Caller closes it):
// a judge whose body broke off before what it needs returns Cut(err), and
// the call is then one without a reply. A judge may run more than once for
// one Do (a connection that could not be opened is dialled again), and
// only for a reply: it keeps its result itself.
type Judge func(resp *http.Response, body io.Reader) (Verdict, error)

// Cut marks err, the error of reading a reply's body, as a reply that broke
// off: the Caller maps the call as one without a (complete) reply.
func Cut(err error) error { return &cutError{err} }

// cutError is a reply body that broke off (Cut).
type cutError struct{ err error }

func (e *cutError) Error() string { return e.err.Error() }
func (e *cutError) Unwrap() error { return e.err }

// WholeBody is a Judge for an adapter that reads a reply whole: it reads
// at most limit+1 bytes of the body (MaxReplyBytes when limit is 0), so
// that judge can tell a body over the bound, and passes them to judge; a
// body that breaks off is Cut.
func WholeBody(limit int, judge func(resp *http.Response, raw []byte) (Verdict, error)) Judge {
	if limit <= 0 {
		limit = MaxReplyBytes
	}
	return func(resp *http.Response, body io.Reader) (Verdict, error) {
		raw, err := io.ReadAll(io.LimitReader(body, int64(limit)+1))
		if err != nil {
			return VerdictHealthy, Cut(err)
		}
		return judge(resp, raw)
	}
}

// Do sends r and judges its reply. Its error is the judge's, or for a
// request without a complete reply:
//
//   - A reply with over MaxReplyHeaderBytes of headers: a
//     *order.TransientError wrapping ErrReplyHeadersTooLarge, counted
//     against the provider like a 5xx (not as a call without a reply).
//   - No reply (timeout, connection refused or reset, EOF, DNS, TLS, a reply
//     cut short): a *order.TransientError, since a missing reply says
//     nothing about whether the provider acted; a connection that could not
//     be opened carried nothing and is dialled again at once, up to
//     BreakerSettings.ConsecutiveNoReply times, its error then marked
//     order.MarkChargeEnded.
//   - ctx canceled by the caller: an error wrapping context.Canceled (the
//     service is shutting down; the event is neither failed nor final).
//
// When the provider is down (BreakerSettings: its credentials refused, its
// last few calls unable to connect or timed out, nearly every call
// failing), the call whose failure showed it and every failure until a
// probe succeeds are an *order.OutageError of the gateway wrapping the
// call's own error, and calls made meanwhile fail at once, sending nothing,
// with an OutageError wrapping ErrCircuitOpen whose RetryAfter is what is
// left of the longest Retry-After the provider sent with a failure, so
// that held events do not probe it sooner.
func (c *Caller) Do(ctx context.Context, r Request, judge Judge) error {
	for attempt := 1; ; attempt++ {
		err := c.doOnce(ctx, r, judge)
		// A connection that could not even be opened carried nothing: trying
		// again at once is free of risk, and it is how a slow stream meets
		// the streak that makes an outage on its first event instead of
		// sending events through the tiers until then.
		if !couldNotConnect(err) || order.Classify(err) != order.ClassTransient || attempt >= c.redials {
			if couldNotConnect(err) {
				err = order.MarkChargeEnded(err) // nothing was sent
			}
			return err
		}
		t := time.NewTimer(time.Duration(attempt) * redialDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// redialDelay is the wait before the first new attempt after a connection
// could not be opened; the next waits grow by as much.
const redialDelay = 50 * time.Millisecond

// couldNotConnect reports whether err is a failure to open a connection
// (refused, no route, DNS), before any byte of the request was sent: not
// when a connection carried the request before (carriedError).
func couldNotConnect(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := errors.AsType[carriedError](err); ok {
		return false
	}
	return isDialError(err)
}

// isDialError reports whether err is a failure to open a connection.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// carriedError is the error of a request that some connection carried,
// whatever error ended it (a resend that could not dial).
type carriedError struct{ error }

func (e carriedError) Unwrap() error { return e.error }

// doOnce is one call of Do through the breaker.
func (c *Caller) doOnce(ctx context.Context, r Request, judge Judge) error {
	_, err := c.breaker.Execute(func() (struct{}, error) {
		v, err := c.send(ctx, r, judge)
		if v.failed() {
			c.noteQuiet(err)
		}
		if err != nil {
			return struct{}{}, &judged{err: err, v: v}
		}
		return struct{}{}, nil
	})
	if j, ok := errors.AsType[*judged](err); ok {
		return c.judge(j)
	}
	// The breaker kept the call away: nothing was sent.
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		return order.MarkChargeEnded(&order.OutageError{Dependency: order.DependencyGateway, RetryAfter: c.quietFor(),
			Err: fmt.Errorf("%w (next probe within %v)", ErrCircuitOpen, c.coolDown)})
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return order.MarkChargeEnded(&order.OutageError{Dependency: order.DependencyGateway, RetryAfter: c.quietFor(),
			Err: fmt.Errorf("%w (a probe call is in flight)", ErrCircuitOpen)})
	}
	return err
}

// judge returns the error of a call that went through the breaker. A
// failure that counts against the provider is an outage while the breaker
// is not closed after it: it opened on this call's evidence or others' (a
// refusal always opens it), or a probe has not succeeded since. While it is
// closed, the provider works (or the failure belonged to an outage that a
// probe has ended), and the failure is the call's own error.
func (c *Caller) judge(j *judged) error {
	if !j.v.failed() || c.breaker.State() == gobreaker.StateClosed {
		return j.err
	}
	retry := c.quietFor()
	if te, ok := errors.AsType[*order.TransientError](j.err); ok {
		retry = max(retry, te.RetryAfter)
	}
	return &order.OutageError{Dependency: order.DependencyGateway, RetryAfter: retry, Err: j.err}
}

// noteQuiet keeps the Retry-After of err, a reply that counted against the
// provider, when it asks for quiet beyond what earlier replies asked.
func (c *Caller) noteQuiet(err error) {
	te, ok := errors.AsType[*order.TransientError](err)
	if !ok || te.RetryAfter <= 0 {
		return
	}
	until := time.Now().Add(te.RetryAfter).UnixNano()
	for {
		old := c.quietUntil.Load()
		if old >= until || c.quietUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// quietFor is what is left of the quiet the provider asked for; zero when
// none is left.
func (c *Caller) quietFor() time.Duration {
	return max(time.Until(time.Unix(0, c.quietUntil.Load())), 0)
}

// ErrCircuitOpen is wrapped by the OutageError that Do returns, without
// calling the provider, while the provider is down and no probe has shown
// it back (BreakerSettings).
var ErrCircuitOpen = errors.New("gateway down: no call until a probe succeeds")

// routeKey carries Request.Route to the span name formatter.
type routeKey struct{}

// send makes one request and judges it for the breaker.
func (c *Caller) send(ctx context.Context, r Request, judge Judge) (Verdict, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel() // after the body is read: the deadline covers it too
	// Whether a connection ever carried the request: net/http's own resend
	// (below) can fail to dial after a first connection carried it to the
	// provider, and that dial error must not pass for "nothing was sent".
	var carried atomic.Bool
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { carried.Store(true) },
	})
	if c.traced {
		rctx = context.WithValue(rctx, routeKey{}, r.Route) // for spanName only
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	hreq, err := http.NewRequestWithContext(rctx, r.Method, r.URL, body)
	if err != nil { // the adapter built the URL from a checked base
		return verdictExcluded, &order.PermanentError{Op: r.Op, Err: fmt.Errorf("build request: %w", redact(err))}
	}
	// Into the request's own map, never r.Header itself: a caller may share
	// its map between requests, and the traceparent below is per request.
	maps.Copy(hreq.Header, r.Header)
	// The caller's trace (docs/interface.md §3); a traced transport replaces it
	// with its client span's (WithTracerProvider).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hreq.Header))

	// net/http may itself send this request once more, on a fresh
	// connection, when a reused keep-alive connection turns out to be closed
	// by the server: it treats a request with an Idempotency-Key as
	// replayable. That is safe for the same reason every retry is: same key.
	start := time.Now()
	resp, err := c.roundTrip(hreq)
	var (
		v   Verdict
		cut *cutError
	)
	if err == nil {
		v, err = judge(resp, resp.Body)
		_ = resp.Body.Close()
		cut, _ = errors.AsType[*cutError](err)
	}
	elapsed := time.Since(start)
	if c.duration != nil {
		c.duration.Observe(elapsed.Seconds())
	}
	status := 0 // no reply
	if resp != nil && cut == nil {
		status = resp.StatusCode
	}
	if c.requests != nil {
		c.requestsOf(status).Inc()
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		code := CodeNoReply
		if status != 0 {
			code = codeLabel(status)
		}
		c.log.DebugContext(ctx, "payment gateway request", slog.String("route", r.Route), slog.String("key", r.Key),
			slog.String("order_id", r.OrderID), slog.String("code", code), slog.Duration("duration", elapsed))
	}

	switch {
	case resp != nil && cut == nil:
		return v, err // the judge's
	case errors.Is(err, ErrReplyHeadersTooLarge) && ctx.Err() == nil:
		// A reply the provider broke, not a missing one: it does answer, so
		// it is no part of the streak of calls that could not connect or
		// timed out, but every call would meet it.
		c.Count(ProtocolReplyHeadersTooLarge)
		return VerdictUnhealthy, &order.TransientError{Op: r.Op,
			Err: fmt.Errorf("%s %s: %w", r.Method, r.Shown, redact(err))}
	}
	if cut != nil {
		err = cut.err
	}
	v, err = c.noReply(ctx, rctx, r, resp, err, carried.Load())
	if carried.Load() {
		err = carriedError{err}
	}
	return v, err
}

// roundTrip sends hreq as http.Client.Do would with redirects never
// followed: a 3xx reply is the reply, since a redirected POST may become a
// GET and a charge must never be sent anywhere but the configured endpoint.
// It does without the Client: for that one rule, Do cloned the request's
// header map on every request (for redirects), and once more to add the
// URL's user info as basic authentication, which is done here in place; the
// Client's other work (a timeout of its own, cookies) is unused. Both
// clones showed in make bench's profiles of the gateway call.
func (c *Caller) roundTrip(hreq *http.Request) (*http.Response, error) {
	if u := hreq.URL.User; u != nil && hreq.Header.Get("Authorization") == "" {
		pass, _ := u.Password()
		hreq.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)))
	}
	resp, err := c.rt.RoundTrip(hreq)
	if err != nil {
		// A RoundTripper returns a reply or an error, never both.
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return nil, err
	}
	return resp, nil // its body never nil (ownWordsTransport)
}

// requestsOf is the requests counter of a reply's status, 0 for no reply.
func (c *Caller) requestsOf(status int) prometheus.Counter {
	if status >= 0 && status < len(c.byStatus) && c.byStatus[status] != nil {
		return c.byStatus[status]
	}
	return c.requests.WithLabelValues(codeLabel(status))
}

// Count counts one protocol error of kind (WithMetrics).
func (c *Caller) Count(kind string) {
	if c.protocol != nil {
		c.protocol.WithLabelValues(kind).Inc()
	}
}

// noReply maps a request that got no (complete) reply. A call that could
// not connect, or got no reply within the timeout, is evidence of a
// provider down (verdictUnreachable); one whose connection carried the
// request and then broke (reset, closed mid-reply, a malformed reply) is
// that call's unknown outcome, counted against the provider's failure
// ratio only.
func (c *Caller) noReply(ctx, rctx context.Context, r Request, resp *http.Response, err error, carried bool) (Verdict, error) {
	what := "no reply"
	if resp != nil {
		what = fmt.Sprintf("reply %d cut short", resp.StatusCode)
	}
	err = redact(err)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller's own cancellation (shutdown), whatever the transport
		// made of it: not the provider's failure, and not a transient one.
		return verdictExcluded, fmt.Errorf("%s: %s %s: %s: canceled: %w", r.Op, r.Method, r.Shown, what, ctx.Err())
	case ctx.Err() != nil:
		// The caller's deadline: retry later, but it says nothing of the provider.
		return verdictExcluded, &order.TransientError{Op: r.Op,
			Err: fmt.Errorf("%s %s: %s within the caller's deadline: %w", r.Method, r.Shown, what, err)}
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return verdictUnreachable, &order.TransientError{Op: r.Op,
			Err: fmt.Errorf("%s %s: %s within %v: %w", r.Method, r.Shown, what, c.timeout, err)}
	case !carried || isDialError(err):
		// No connection carried it, or net/http's resend of it could not
		// dial: the provider refuses connections or cannot be reached.
		return verdictUnreachable, &order.TransientError{Op: r.Op,
			Err: fmt.Errorf("%s %s: %s: %w", r.Method, r.Shown, what, err)}
	}
	return VerdictUnhealthy, &order.TransientError{Op: r.Op,
		Err: fmt.Errorf("%s %s: %s (the request was sent: its outcome is unknown): %w", r.Method, r.Shown, what, err)}
}

// RetryAfter parses a Retry-After value, delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3); zero when absent, invalid or in the past.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// redact replaces a *url.Error, whose text repeats the request URL (userinfo
// included, with only the password masked), by its cause; the caller adds
// the redacted URL. The cause keeps its type for errors.Is and errors.As.
func redact(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
