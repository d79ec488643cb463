// Package httpgateway is the payment gateway adapter: it implements
// order.PaymentGateway over HTTP as docs/interface.md §6 describes, translating
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
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/billing/adapters/out/http/reply"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// MaxReplyBytes is how much of a reply body is read (reply.MaxBytes: the
// body is scanned as it arrives, so this bounds the time spent on a reply,
// not the memory it takes).
const MaxReplyBytes = reply.MaxBytes

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

// Header names of the idempotency protocol (docs/interface.md §6).
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
	*Caller
	endpoint string // POST target, userinfo included (net/http sends it as basic auth)
	redacted string // endpoint without userinfo, the only form that appears in errors and logs
}

// Option configures a Client.
type Option func(*options)

type options struct {
	idle     int
	rt       http.RoundTripper // the transport under the Caller's own (tests only: WithHTTPClient)
	requests *prometheus.CounterVec
	duration prometheus.Histogram
	log      *slog.Logger
	breaker  BreakerSettings
	tp       trace.TracerProvider
	tls      *tls.Config
	protocol *prometheus.CounterVec
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

// WithMetrics makes the Client count every request in m.Requests, by code
// label (codeLabel: the status for the codes docs/interface.md §6 names and the
// registered 5xx codes, CodeOther for any other status, CodeNoReply when no
// reply arrived), each created at zero; observe its latency in m.Duration;
// and count the gateway's protocol errors in m.ProtocolErrors
// (billing_gateway_protocol_errors_total) by kind label, each kind of
// ProtocolErrorKinds created at zero. m and each of its fields may be nil:
// what is nil is not counted.
func WithMetrics(m *metrics.Gateway) Option {
	return func(o *options) {
		if m != nil {
			o.requests, o.duration, o.protocol = m.Requests, m.Duration, m.ProtocolErrors
		}
	}
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
	caller, err := NewCaller(timeout, user, opts...)
	if err != nil {
		return nil, err
	}
	return &Client{Caller: caller, endpoint: endpoint, redacted: redacted}, nil
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

// jsonMediaType is the value of a charge's Content-Type and Accept: one
// list for all, never written to.
var jsonMediaType = []string{"application/json"}

// chargeBody is the JSON body of a charge request (docs/interface.md §6).
type chargeBody struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// encode is json.Marshal(b), byte for byte (TestChargeBodyEncodesAsJSON).
// Its strings are an order id, a customer id and a currency code, which
// need no escape as a rule: those are written as they are, without the
// reflection of encoding/json, which cost more than the rest of the body's
// making. A string that json.Marshal would escape or change sends the body
// through json.Marshal.
func (b chargeBody) encode() ([]byte, error) {
	if !jsonVerbatim(b.OrderID) || !jsonVerbatim(b.CustomerID) || !jsonVerbatim(b.Currency) {
		return json.Marshal(b)
	}
	out := make([]byte, 0, len(`{"order_id":"","customer_id":"","amount":,"currency":""}`)+
		len(b.OrderID)+len(b.CustomerID)+len(b.Currency)+20)
	out = append(out, `{"order_id":"`...)
	out = append(out, b.OrderID...)
	out = append(out, `","customer_id":"`...)
	out = append(out, b.CustomerID...)
	out = append(out, `","amount":`...)
	out = strconv.AppendInt(out, b.Amount, 10)
	out = append(out, `,"currency":"`...)
	out = append(out, b.Currency...)
	out = append(out, `"}`...)
	return out, nil
}

// jsonVerbatim reports whether json.Marshal writes s between its quotes as
// it is: printable ASCII but the quote, the backslash and the three bytes
// it escapes for HTML (<, >, &).
func jsonVerbatim(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// Charge posts req to the gateway under req.IdempotencyKey and maps the
// reply per docs/interface.md §6:
//
//   - 200/201 with status "succeeded": ChargeSucceeded (Replayed when the
//     gateway says Idempotent-Replayed: true), with the charge id when it
//     is one an invoice may keep (order.ValidChargeID) and without it
//     otherwise, counted as a protocol error (WithMetrics): nothing
//     in a success makes it anything but a charge. A 200/201 whose body
//     said "succeeded" at its top level is a charge even if the body then
//     breaks. A 2xx without that proof (any other status, an unreadable
//     body, 202, 204…) is neither a charge nor a decline: a
//     *order.TransientError, so that the same key is tried again and the
//     gateway replays its real answer.
//   - 402: ChargeDeclined, no error.
//   - 409 with Retry-After or {"error":"in_progress"}: *order.TransientError
//     (the key is still being processed); any other 409: ChargeSucceeded,
//     with the charge_id of the body if it has one that may be kept.
//   - 401, 403 (the service's own credentials refused): an
//     *order.OutageError of the gateway; every event would meet the same.
//   - 422 and every other 4xx: *order.PermanentError wrapping an
//     *order.ChargeRefusedError, of kind RefusalKeyReused for 422 (the
//     invoice stays pending) and RefusalRejected otherwise (no money moved:
//     the invoice becomes rejected).
//   - 429, 5xx, and any other status (a 3xx: redirects are not followed):
//     *order.TransientError, RetryAfter from the Retry-After header.
//   - A reply with over MaxReplyHeaderBytes of headers: a
//     *order.TransientError wrapping ErrReplyHeadersTooLarge.
//   - No reply (timeout, connection refused or reset, EOF, DNS, TLS, a reply
//     cut short): a *order.TransientError, since a missing reply says
//     nothing about whether the gateway charged; the same key makes the
//     retry safe.
//   - ctx canceled by the caller: an error wrapping context.Canceled (the
//     service is shutting down; the event is neither failed nor final).
//
// Every error for a reply wraps an *order.GatewayReplyError: the status
// and the gateway's error code when it is a short token, and nothing else
// the gateway wrote (scrub.go).
//
// When the gateway is down (BreakerSettings: its credentials refused, its
// last few calls unable to connect or timed out, nearly every call
// failing), the call whose failure showed it and every failure until a
// probe succeeds are an *order.OutageError of the gateway wrapping the
// call's own error, and calls made meanwhile fail at once, sending nothing,
// with an OutageError wrapping ErrCircuitOpen whose RetryAfter is what is
// left of the longest Retry-After the gateway sent with a failure, so that
// held events do not probe it sooner.
func (c *Client) Charge(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	payload, err := chargeBody{
		OrderID:    req.OrderID,
		CustomerID: req.CustomerID,
		Amount:     req.Amount.Amount,
		Currency:   req.Amount.Currency,
	}.encode()
	if err != nil { // cannot happen for these field types
		return order.ChargeResult{}, &order.PermanentError{Op: op, Err: fmt.Errorf("encode body: %w", err)}
	}
	key := req.IdempotencyKey.String()
	// Canonical names, so no Set is needed; the value lists of the fixed
	// headers are shared by every charge, which only read them (send
	// copies the map, never a list).
	hdr := http.Header{"Content-Type": jsonMediaType, "Accept": jsonMediaType, HeaderIdempotencyKey: {key}}
	var res order.ChargeResult
	err = c.Do(ctx, Request{Op: op, Method: http.MethodPost, URL: c.endpoint, Shown: c.redacted, Route: "/charges",
		Header: hdr, Body: payload, Key: key, OrderID: req.OrderID},
		func(resp *http.Response, raw io.Reader) (Verdict, error) {
			body, err := reply.Read(raw, MaxReplyBytes)
			if err != nil && !errors.As(err, new(*reply.UnreadableError)) &&
				((resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated) || !body.Succeeded()) {
				// The body broke off before it said the money moved.
				return VerdictHealthy, Cut(err)
			}
			var v Verdict
			res, v, err = c.reply(resp, body, err)
			if err == nil {
				// What the invoice's history of answers records
				// (order.AnswerOf); an error carries its reply as an
				// order.GatewayReplyError.
				res.StatusCode = resp.StatusCode
			}
			if err != nil && answeredUnexecuted(resp.StatusCode) {
				err = order.MarkChargeEnded(err)
			}
			return v, err
		})
	if err != nil {
		return order.ChargeResult{}, err
	}
	return res, nil
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

// reply maps a reply whose body was read into body; bodyErr is what kept it
// from being read whole (a *reply.UnreadableError, or a connection that broke
// after a 200/201 said "succeeded").
func (c *Client) reply(resp *http.Response, body reply.Body, bodyErr error) (order.ChargeResult, Verdict, error) {
	status := resp.StatusCode
	replayed := strings.EqualFold(resp.Header.Get(HeaderReplayed), "true")
	answer := &order.GatewayReplyError{StatusCode: status}
	if body.ErrCode.Kind == reply.String && !c.scrub.holds(body.ErrCode.Value) {
		// A token can still be an echo of the credentials (their base64 in
		// the URL alphabet is one): such a code is not repeated.
		answer.Code = order.GatewayCode(body.ErrCode.Value)
	}

	switch {
	case status == http.StatusOK || status == http.StatusCreated:
		if body.Succeeded() {
			// "succeeded" is the proof; nothing else in the reply undoes it.
			var unreadable *reply.UnreadableError
			if errors.As(bodyErr, &unreadable) {
				c.Count(ProtocolReplyUnreadable)
			}
			return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: c.chargeID(body.ChargeID, true), Replayed: replayed}, VerdictHealthy, nil
		}
		if bodyErr != nil {
			c.Count(ProtocolReplyUnreadable)
			return order.ChargeResult{}, VerdictHealthy, c.transient(resp, answer, bodyErr.Error())
		}
		c.Count(ProtocolChargeStatus)
		return order.ChargeResult{}, VerdictHealthy, c.transient(resp, answer, `a charge status other than "succeeded"`)

	case status == http.StatusPaymentRequired:
		return order.ChargeResult{Status: order.ChargeDeclined, Replayed: replayed}, VerdictHealthy, nil

	case status == http.StatusConflict:
		if resp.Header.Get("Retry-After") != "" || answer.Code == "in_progress" {
			return order.ChargeResult{}, VerdictHealthy, c.transient(resp, answer, "a request with this key is still in progress")
		}
		// The provider already processed this key. Which charge it made is
		// not said unless the body names it.
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: c.chargeID(body.ChargeID, false), Replayed: true}, VerdictHealthy, nil

	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The service's own credentials, not this event: every event would
		// get the same answer (docs/interface.md §6). The breaker opens on it, and
		// judge makes it the outage.
		return order.ChargeResult{}, VerdictRefused, c.transient(resp, answer, "credentials refused")

	case status == http.StatusTooManyRequests || status >= 500:
		return order.ChargeResult{}, VerdictUnhealthy, c.transient(resp, answer, http.StatusText(status))

	case status >= 400:
		// 422: the key was used with another body, money may have moved
		// under it; any other 4xx: the request was refused unexecuted.
		kind := order.RefusalRejected
		if status == http.StatusUnprocessableEntity {
			kind = order.RefusalKeyReused
		}
		return order.ChargeResult{}, VerdictHealthy, &order.PermanentError{Op: op, Err: &order.ChargeRefusedError{
			Kind: kind, StatusCode: status,
			Err: fmt.Errorf("POST %s: %w (%s)", c.redacted, answer, http.StatusText(status))}}

	case status >= 200 && status < 300: // 202, 204…: not the contract's proof of a charge
		c.Count(ProtocolUnexpectedStatus)
		return order.ChargeResult{}, VerdictHealthy, c.transient(resp, answer, "want 200 or 201")
	}
	// 1xx (net/http handles the real ones) and 3xx: a gateway (or a proxy
	// in front of it) that does not speak the contract says nothing about
	// this event; counted against the gateway so that a misconfigured base
	// URL becomes an outage rather than a stream of dead letters.
	c.Count(ProtocolUnexpectedStatus)
	return order.ChargeResult{}, VerdictUnhealthy, c.transient(resp, answer, "a status the contract does not name")
}

// transient returns a *order.TransientError for a reply: the answer, in the
// Client's words why it is no charge, and the reply's Retry-After as the
// hint.
func (c *Client) transient(resp *http.Response, answer *order.GatewayReplyError, why string) error {
	return &order.TransientError{
		Op:         op,
		Err:        fmt.Errorf("POST %s: %w: %s", c.redacted, answer, why),
		RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// chargeID returns the charge id of a success when an invoice may keep it
// (order.ValidChargeID), and "" otherwise, counting the protocol error;
// an absent one is an error only when required (a 200/201: a 409 may not
// say which charge it made).
func (c *Client) chargeID(m reply.Member, required bool) string {
	switch {
	case m.Kind == reply.Absent || (m.Kind == reply.String && m.Value == ""):
		if required {
			c.Count(ProtocolChargeIDMissing)
		}
	case m.Kind == reply.TooLong || (m.Kind == reply.String && len(m.Value) > order.MaxChargeIDBytes):
		c.Count(ProtocolChargeIDTooLong)
	case m.Kind == reply.NotString:
		c.Count(ProtocolChargeIDNotString)
	case m.Kind == reply.BadString || !order.ValidChargeID(m.Value):
		c.Count(ProtocolChargeIDNotPrintable)
	case c.scrub.holds(m.Value):
		c.Count(ProtocolChargeIDCredentials)
	default:
		return m.Value
	}
	return ""
}

// oneLineMax makes text safe for a one-line error: control characters
// become spaces and it is cut to limit bytes.
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
