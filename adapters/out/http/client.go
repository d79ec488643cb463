// Package httpgateway is the payment gateway adapter: it implements
// order.PaymentGateway over HTTP as CONTRACT.md §6 describes, translating
// every reply and transport failure into a ChargeResult or a typed error of
// core/order, and it stops calling a gateway that fails nearly every call
// (a circuit breaker), reporting an outage instead.
//
// The layout fixes the directory, adapters/out/http: an outbound adapter
// named after the protocol it speaks. The package is not named http, which
// would shadow net/http here and in every file that imports both; it is
// httpgateway, the folder's name followed by what it reaches, so that
// httpgateway.NewClient reads as the HTTP client of the gateway.
package httpgateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/billing/core/order"
)

// MaxReplyBytes is how much of a reply body is read; a charge reply is a few
// dozen bytes, and a success reply that does not fit is treated as unreadable.
const MaxReplyBytes = 64 << 10

// MaxReplyHeaderBytes bounds the header section of a reply (the
// transport's MaxResponseHeaderBytes; net/http's default is 10 MiB, read
// into memory for each reply in flight). A gateway sends a few hundred
// bytes of headers, a CDN or WAF in front of it a few KiB more (cookies, a
// CSP): 64 KiB leaves room for several times that, the same bound as the
// body, and keeps 64 charges in flight under 4 MiB of headers whatever
// the gateway sends. A reply over it is a reply the gateway broke
// (ErrReplyHeadersTooLarge): transient for the event, since the charge may
// have been made and the same key makes the retry safe, and counted against
// the gateway like a 5xx, since every call would meet it.
const MaxReplyHeaderBytes = 64 << 10

// Header names of the idempotency protocol (CONTRACT.md §6).
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
)

// op is the Op of every error Charge returns.
const op = "payment gateway charge"

var _ order.PaymentGateway = (*Client)(nil)

// Client charges orders at the payment gateway. It is safe for concurrent
// use; create one per gateway and share it.
type Client struct {
	endpoint   string    // POST target, userinfo included (net/http sends it as basic auth)
	redacted   string    // endpoint without userinfo, the only form that appears in errors and logs
	scrub      *scrubber // removes the userinfo from any text the gateway wrote
	timeout    time.Duration
	hc         *http.Client
	requests   *prometheus.CounterVec
	duration   prometheus.Histogram
	log        *slog.Logger
	breaker    *gobreaker.CircuitBreaker[order.ChargeResult]
	coolDown   time.Duration
	noReplies  atomic.Int32 // calls in a row that got no reply
	maxNoReply int32        // noReplies at which the gateway is an outage
	// quietUntil is the latest time (Unix nanoseconds) until which an
	// unwell gateway asked, by Retry-After, to be left alone: the outage
	// the breaker reports carries what is left of it.
	quietUntil atomic.Int64
}

// Option configures a Client.
type Option func(*options)

type options struct {
	idle     int
	hc       *http.Client
	requests *prometheus.CounterVec
	duration prometheus.Histogram
	log      *slog.Logger
	breaker  BreakerSettings
	tp       trace.TracerProvider
	tls      *tls.Config
}

// DefaultIdleConns is how many idle connections to the gateway the Client
// keeps without WithIdleConns.
const DefaultIdleConns = 128

// WithIdleConns keeps up to n idle connections to the gateway: as many as
// charges can be in flight at once (BILLING_MAX_IN_FLIGHT), so that none is
// closed after its request only to be opened again for the next one.
func WithIdleConns(n int) Option {
	return func(o *options) { o.idle = n }
}

// WithTLSConfig makes the Client's own transport use a clone of cfg, for
// example to trust a gateway's private CA (RootCAs); without it, the
// system's roots.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// WithMetrics makes the Client count every request in requests, by code
// label (codeLabel: the status for the codes CONTRACT.md §6 names and the
// registered 5xx codes, CodeOther for any other status, CodeNoReply when no
// reply arrived), each created at zero, and observe its latency in
// duration. Either may be nil.
func WithMetrics(requests *prometheus.CounterVec, duration prometheus.Histogram) Option {
	return func(o *options) { o.requests, o.duration = requests, duration }
}

// WithLogger sets the logger (default: discard). The Client logs breaker
// state changes and, at debug level, each request; it does not log the
// errors it returns, which its caller handles.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}

// NewClient returns a Client that posts charges to baseURL + "/charges",
// each bounded by timeout. baseURL must be an absolute http or https URL;
// userinfo in it is sent as basic authentication and never printed.
func NewClient(baseURL string, timeout time.Duration, opts ...Option) (*Client, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("payment client: timeout %v, want > 0", timeout)
	}
	endpoint, redacted, user, err := chargesURL(baseURL)
	if err != nil {
		return nil, fmt.Errorf("payment client: base URL: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{
		endpoint: endpoint,
		redacted: redacted,
		scrub:    newScrubber(user),
		timeout:  timeout,
		requests: o.requests,
		duration: o.duration,
		log:      o.log,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if o.hc != nil {
		hc := *o.hc // a shallow copy; the Transport is shared, as it should be
		c.hc = &hc
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// One idle connection per event in flight rather than net/http's 2
		// per host (and 100 in all), which would open and close a
		// connection for most charges under load.
		idle := o.idle
		if idle <= 0 {
			idle = DefaultIdleConns
		}
		tr.MaxIdleConnsPerHost, tr.MaxIdleConns = idle, idle
		// Also MAX_HEADER_LIST_SIZE over HTTP/2: net/http passes it on.
		tr.MaxResponseHeaderBytes = MaxReplyHeaderBytes
		if o.tls != nil {
			tr.TLSClientConfig = o.tls.Clone()
		}
		c.hc = &http.Client{Transport: tr}
	}
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	base := c.hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.hc.Transport = traced(scrubbedTransport{base: base, s: c.scrub}, o.tp)
	if c.requests != nil {
		for _, code := range CodeLabels() {
			c.requests.WithLabelValues(code)
		}
	}
	c.breaker, c.coolDown = newBreaker(o.breaker, c.log)
	c.maxNoReply = o.breaker.ConsecutiveNoReply
	if c.maxNoReply <= 0 {
		c.maxNoReply = DefaultConsecutiveNoReply
	}
	return c, nil
}

// chargesURL returns the charge endpoint under base, the same without
// userinfo, and the userinfo. Its errors never repeat base, which may hold
// a password.
func chargesURL(base string) (endpoint, redacted string, user *url.Userinfo, err error) {
	u, err := url.Parse(base)
	if err != nil {
		// url.Error repeats the whole URL, and its cause may quote a part
		// of it ("invalid port \":pa55\" after host" when the @ is missing).
		return "", "", nil, errors.New("not a URL (details withheld: they may quote user info)")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", "", nil, fmt.Errorf("scheme %q, want http or https", u.Scheme)
	}
	if u.Host == "" {
		return "", "", nil, errors.New("no host")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", nil, errors.New("has a query or fragment, want a plain base URL")
	}
	u = u.JoinPath("charges")
	endpoint, user = u.String(), u.User
	u.User = nil
	return endpoint, u.String(), user, nil
}

// CloseIdleConnections closes the idle connections of the Client's transport.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// chargeBody is the JSON body of a charge request (CONTRACT.md §6).
type chargeBody struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// chargeReply is the part of a reply body the Client reads.
type chargeReply struct {
	ChargeID string `json:"charge_id"`
	Status   string `json:"status"`
	Error    string `json:"error"`
	Message  string `json:"message"`
}

// Charge posts req to the gateway under req.IdempotencyKey and maps the
// reply per CONTRACT.md §6:
//
//   - 200/201 with status "succeeded": ChargeSucceeded (Replayed when the
//     gateway says Idempotent-Replayed: true). A 2xx without that proof (any
//     other status, an unreadable or oversized body, 202, 204…) is neither a
//     charge nor a decline: a *order.TransientError, so that the same key is
//     tried again and the gateway replays its real answer. If it never does,
//     the event ends in the DLQ after the last retry tier, for a person.
//   - 402: ChargeDeclined, no error.
//   - 409 with Retry-After or {"error":"in_progress"}: *order.TransientError
//     (the key is still being processed); any other 409: ChargeSucceeded,
//     with the charge_id of the body if it has one (the key was processed).
//   - 401, 403 (the service's own credentials refused): an
//     *order.OutageError of the gateway; every event would meet the same.
//   - 422 and every other 4xx: *order.PermanentError wrapping an
//     *order.ChargeRefusedError, of kind RefusalKeyReused for 422 (the
//     invoice stays pending) and RefusalRejected otherwise (no money moved:
//     the invoice becomes rejected).
//   - 429, 5xx, and any other status (a 3xx: redirects are not followed):
//     *order.TransientError, RetryAfter from the Retry-After header.
//   - A reply with over MaxReplyHeaderBytes of headers: a
//     *order.TransientError wrapping ErrReplyHeadersTooLarge, counted
//     against the gateway like a 5xx (not as a call without a reply).
//   - No reply (timeout, connection refused or reset, EOF, DNS, TLS): a
//     *order.TransientError, since a missing reply says nothing about
//     whether the gateway charged; the same key makes the retry safe.
//     Once the last few calls (BreakerSettings.ConsecutiveNoReply) all got
//     no reply, an *order.OutageError of the gateway wrapping it instead.
//   - ctx canceled by the caller: an error wrapping context.Canceled (the
//     service is shutting down; the event is neither failed nor final).
//   - The breaker open: *order.OutageError{Dependency: "gateway"} without
//     calling the gateway; its RetryAfter is what is left of the longest
//     Retry-After of the 429 and 5xx replies (those that count against the
//     gateway), so that held events do not probe it sooner.
//
// Text the gateway wrote (its error and message, a wrong charge status, a
// malformed reply that net/http quotes) appears in errors only without the
// user info of the base URL, in any encoding (scrubber), and cut short.
func (c *Client) Charge(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := c.chargeOnce(ctx, req)
		// A connection that could not even be opened carried nothing: trying
		// again at once is free of risk, and it is how a slow stream meets
		// the streak that makes an outage on its first event instead of
		// sending events through the tiers until then.
		if !couldNotConnect(err) || order.Classify(err) != order.ClassTransient || attempt >= int(c.maxNoReply) {
			if couldNotConnect(err) {
				err = order.MarkChargeEnded(err) // nothing was sent
			}
			return res, err
		}
		t := time.NewTimer(time.Duration(attempt) * redialDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, err
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
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// carriedError is the error of a request that some connection carried,
// whatever error ended it (a resend that could not dial).
type carriedError struct{ error }

func (e carriedError) Unwrap() error { return e.error }

// chargeOnce is one call of Charge through the breaker.
func (c *Client) chargeOnce(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	res, err := c.breaker.Execute(func() (order.ChargeResult, error) {
		res, v, err := c.post(ctx, req)
		if v == verdictUnhealthy {
			c.noteQuiet(err)
		}
		streak := c.countNoReply(v)
		if v == verdictNoReply && streak >= c.maxNoReply {
			err = &order.OutageError{Dependency: order.DependencyGateway,
				Err: fmt.Errorf("the last %d calls got no reply: %w", streak, err)}
		}
		if err != nil {
			return res, &judged{err: err, v: v}
		}
		return res, nil
	})
	if j, ok := errors.AsType[*judged](err); ok {
		return res, j.err
	}
	// The breaker kept the call away: nothing was sent.
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		return order.ChargeResult{}, order.MarkChargeEnded(&order.OutageError{Dependency: order.DependencyGateway, RetryAfter: c.quietFor(),
			Err: fmt.Errorf("%w (circuit breaker open; next probe within %v)", ErrCircuitOpen, c.coolDown)})
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return order.ChargeResult{}, order.MarkChargeEnded(&order.OutageError{Dependency: order.DependencyGateway, RetryAfter: c.quietFor(),
			Err: fmt.Errorf("%w (circuit breaker half-open; a probe call is in flight)", ErrCircuitOpen)})
	}
	return res, err
}

// noteQuiet keeps the Retry-After of err, a reply that counted against the
// gateway, when it asks for quiet beyond what earlier replies asked.
func (c *Client) noteQuiet(err error) {
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

// quietFor is what is left of the quiet the gateway asked for; zero when
// none is left.
func (c *Client) quietFor() time.Duration {
	return max(time.Until(time.Unix(0, c.quietUntil.Load())), 0)
}

// countNoReply keeps the streak of calls without a reply: a call with no
// reply extends it, any reply ends it, a call the caller gave up on leaves
// it. It returns the streak after this call.
func (c *Client) countNoReply(v verdict) int32 {
	switch v {
	case verdictNoReply:
		return c.noReplies.Add(1)
	case verdictExcluded:
		return c.noReplies.Load()
	}
	c.noReplies.Store(0)
	return 0
}

// ErrCircuitOpen is wrapped by the OutageError that Charge returns while the
// breaker keeps calls away from a gateway that failed nearly every call.
var ErrCircuitOpen = errors.New("gateway failing nearly every call")

// post makes one request and judges it for the breaker.
func (c *Client) post(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, verdict, error) {
	payload, err := json.Marshal(chargeBody{
		OrderID:    req.OrderID,
		CustomerID: req.CustomerID,
		Amount:     req.Amount.Amount,
		Currency:   req.Amount.Currency,
	})
	if err != nil { // cannot happen for these field types
		return order.ChargeResult{}, verdictExcluded, &order.PermanentError{Op: op, Err: fmt.Errorf("encode body: %w", err)}
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel() // after the body is read: the deadline covers it too
	// Whether a connection ever carried the request: net/http's own resend
	// (below) can fail to dial after a first connection carried it to the
	// gateway, and that dial error must not pass for "nothing was sent".
	var carried atomic.Bool
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { carried.Store(true) },
	})
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, c.endpoint, bytes.NewReader(payload))
	if err != nil { // the endpoint was checked by NewClient
		return order.ChargeResult{}, verdictExcluded, &order.PermanentError{Op: op, Err: fmt.Errorf("build request: %w", redact(err))}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set(HeaderIdempotencyKey, req.IdempotencyKey.String())
	// The caller's trace (CONTRACT.md §3); a traced transport replaces it
	// with its client span's (WithTracerProvider).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hreq.Header))

	// net/http may itself send this request once more, on a fresh
	// connection, when a reused keep-alive connection turns out to be closed
	// by the server: it treats a request with an Idempotency-Key as
	// replayable. That is safe for the same reason every retry is: same key.
	start := time.Now()
	resp, err := c.hc.Do(hreq)
	var raw []byte
	if err == nil {
		raw, err = io.ReadAll(io.LimitReader(resp.Body, MaxReplyBytes+1))
		_ = resp.Body.Close()
	}
	elapsed := time.Since(start)
	if c.duration != nil {
		c.duration.Observe(elapsed.Seconds())
	}
	code := CodeNoReply
	if resp != nil {
		code = codeLabel(resp.StatusCode)
	}
	if c.requests != nil {
		c.requests.WithLabelValues(code).Inc()
	}
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.DebugContext(ctx, "payment gateway request", slog.String("key", req.IdempotencyKey.String()),
			slog.String("order_id", req.OrderID), slog.String("code", code), slog.Duration("duration", elapsed))
	}

	if err != nil {
		if errors.Is(err, ErrReplyHeadersTooLarge) && ctx.Err() == nil {
			// A reply the gateway broke, not a missing one: it does
			// answer, so it is no part of the streak of calls without a
			// reply, but every call would meet it.
			return order.ChargeResult{}, verdictUnhealthy, &order.TransientError{Op: op,
				Err: fmt.Errorf("POST %s: %w", c.redacted, redact(err))}
		}
		res, v, err := c.noReply(ctx, rctx, resp, err)
		if carried.Load() {
			err = carriedError{err}
		}
		return res, v, err
	}
	res, v, err := c.reply(resp, raw)
	if err != nil && answeredUnexecuted(resp.StatusCode) {
		err = order.MarkChargeEnded(err)
	}
	return res, v, err
}

// answeredUnexecuted reports whether a reply with status leaves nothing
// under its key running at the gateway: the gateway refused to act on it
// (429, 500, 503, 501…) or refused the service (401, 403). Not 502 and 504,
// which a proxy in front of the gateway sends while the request may still
// run behind it; not 409 in progress, which says a request under this key
// runs there right now (an earlier one that timed out here); not a 2xx
// without proof of a charge (202: accepted, maybe running); not a 4xx
// refusal, whose invoice is settled anyway.
func answeredUnexecuted(status int) bool {
	switch status {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return false
	case http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden:
		return true
	}
	return status >= 500
}

// noReply maps a request that got no (complete) reply.
func (c *Client) noReply(ctx, rctx context.Context, resp *http.Response, err error) (order.ChargeResult, verdict, error) {
	what := "no reply"
	if resp != nil {
		what = fmt.Sprintf("reply %d cut short", resp.StatusCode)
	}
	err = redact(err)
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller's own cancellation (shutdown), whatever the transport
		// made of it: not the gateway's failure, and not a transient one.
		return order.ChargeResult{}, verdictExcluded, fmt.Errorf("%s: POST %s: %s: canceled: %w", op, c.redacted, what, ctx.Err())
	case ctx.Err() != nil:
		// The caller's deadline: retry later, but it says nothing of the gateway.
		return order.ChargeResult{}, verdictExcluded, &order.TransientError{Op: op,
			Err: fmt.Errorf("POST %s: %s within the caller's deadline: %w", c.redacted, what, err)}
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return order.ChargeResult{}, verdictNoReply, &order.TransientError{Op: op,
			Err: fmt.Errorf("POST %s: %s within %v: %w", c.redacted, what, c.timeout, err)}
	}
	return order.ChargeResult{}, verdictNoReply, &order.TransientError{Op: op,
		Err: fmt.Errorf("POST %s: %s: %w", c.redacted, what, err)}
}

// reply maps a complete reply.
func (c *Client) reply(resp *http.Response, raw []byte) (order.ChargeResult, verdict, error) {
	status := resp.StatusCode
	replayed := strings.EqualFold(resp.Header.Get(HeaderReplayed), "true")
	var body chargeReply
	bodyErr := error(nil)
	if len(raw) > MaxReplyBytes {
		bodyErr = fmt.Errorf("reply body over %d bytes", MaxReplyBytes)
	} else if err := json.Unmarshal(raw, &body); err != nil {
		bodyErr = fmt.Errorf("reply body is not a JSON charge object: %w", err)
	}

	switch {
	case status == http.StatusOK || status == http.StatusCreated:
		if bodyErr != nil {
			return order.ChargeResult{}, verdictHealthy, c.transient(resp, "%d with %v", status, bodyErr)
		}
		if body.Status != "succeeded" {
			return order.ChargeResult{}, verdictHealthy, c.transient(resp, "%d with charge status %q, want \"succeeded\"", status, c.scrub.clean(body.Status))
		}
		// "succeeded" is the proof; a missing charge_id does not undo it
		// (the invoice's charge_id may be empty, as after a plain 409).
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: body.ChargeID, Replayed: replayed}, verdictHealthy, nil

	case status == http.StatusPaymentRequired:
		return order.ChargeResult{Status: order.ChargeDeclined, Replayed: replayed}, verdictHealthy, nil

	case status == http.StatusConflict:
		if resp.Header.Get("Retry-After") != "" || body.Error == "in_progress" {
			return order.ChargeResult{}, verdictHealthy, c.transient(resp, "409: a request with this key is still in progress")
		}
		// The provider already processed this key. Which charge it made is
		// not said unless the body names it.
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: body.ChargeID, Replayed: true}, verdictHealthy, nil

	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The service's own credentials, not this event: every event
		// would get the same answer (CONTRACT.md §6).
		return order.ChargeResult{}, verdictHealthy, &order.OutageError{Dependency: order.DependencyGateway,
			RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()),
			Err:        fmt.Errorf("%s: POST %s: %d %s: credentials refused%s", op, c.redacted, status, http.StatusText(status), c.detail(body))}

	case status == http.StatusTooManyRequests || status >= 500:
		return order.ChargeResult{}, verdictUnhealthy, c.transient(resp, "%d %s%s", status, http.StatusText(status), c.detail(body))

	case status >= 400:
		// 422: the key was used with another body, money may have moved
		// under it; any other 4xx: the request was refused unexecuted.
		kind := order.RefusalRejected
		if status == http.StatusUnprocessableEntity {
			kind = order.RefusalKeyReused
		}
		return order.ChargeResult{}, verdictHealthy, &order.PermanentError{Op: op, Err: &order.ChargeRefusedError{
			Kind: kind, StatusCode: status,
			Err: fmt.Errorf("POST %s: %d %s%s", c.redacted, status, http.StatusText(status), c.detail(body))}}

	case status >= 200 && status < 300: // 202, 204…: not the contract's proof of a charge
		return order.ChargeResult{}, verdictHealthy, c.transient(resp, "%d %s, want 200 or 201", status, http.StatusText(status))
	}
	// 1xx (net/http handles the real ones) and 3xx: a gateway (or a proxy
	// in front of it) that does not speak the contract says nothing about
	// this event; counted against the gateway so that a misconfigured base
	// URL becomes an outage rather than a stream of dead letters.
	return order.ChargeResult{}, verdictUnhealthy, c.transient(resp, "unexpected %d %s", status, http.StatusText(status))
}

// transient returns a *order.TransientError for a reply, with the reply's
// Retry-After as the hint.
func (c *Client) transient(resp *http.Response, format string, args ...any) error {
	return &order.TransientError{
		Op:         op,
		Err:        fmt.Errorf("POST %s: %s", c.redacted, fmt.Sprintf(format, args...)),
		RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// retryAfter parses a Retry-After value, delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3); zero when absent, invalid or in the past.
func retryAfter(v string, now time.Time) time.Duration {
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

// maxDetail bounds the gateway's own words repeated in an error.
const maxDetail = 200

// detail returns the gateway's error code and message for an error text,
// without the service's credentials, one line and bounded, or "".
func (c *Client) detail(b chargeReply) string {
	s := b.Error
	if b.Message != "" {
		if s != "" {
			s += ": "
		}
		s += b.Message
	}
	if s == "" {
		return ""
	}
	return " (" + c.scrub.clean(s) + ")"
}

// oneLine makes text from the gateway safe for a one-line error: control
// characters become spaces and it is cut to maxDetail bytes. It does not
// remove credentials: scrubber.clean does both.
func oneLine(s string) string { return oneLineMax(s, maxDetail) }

// oneLineMax is oneLine cutting at limit bytes.
func oneLineMax(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
	if len(s) > limit {
		cut := limit
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func isRuneStart(b byte) bool { return b&0xc0 != 0x80 }

// redact replaces a *url.Error, whose text repeats the request URL (userinfo
// included, with only the password masked), by its cause; the caller adds
// the redacted URL. The cause keeps its type for errors.Is and errors.As.
func redact(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
