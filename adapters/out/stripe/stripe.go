// Package stripe is the payment adapter for Stripe's PaymentIntents API
// (BILLING_PAYMENT_PROVIDER=stripe): it implements order.PaymentGateway
// and order.PaymentRecords as docs/interface.md §6's Stripe paragraph maps them.
// A charge is one PaymentIntent created and confirmed in one call, off
// session, with the customer's default payment method, under the
// invoice's key as Idempotency-Key and a pinned Stripe-Version; the
// PaymentIntent's id (pi_…) is the charge id billing records.
//
// It speaks plain net/http through httpgateway.Caller, the engine the
// generic adapter uses, so that the payment timeout, the bounds on a reply,
// the circuit breaker, the outage evidence, the metrics and the client
// span are the same code for both providers (docs/design.md, "Stripe": why
// not stripe-go). Only what Stripe's answers mean is this package's.
//
// Stripe's free text (an error's message, a decline's explanation) never
// leaves the package: errors carry the HTTP status and at most Stripe's
// error type and code when they are short tokens (httpgateway.Token).
package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
)

// APIVersion is the Stripe-Version every request carries: the API version
// billing's mapping was written and tested against (the one stripe-mock
// v0.203.0 validates with -strict-version-check). A new version is a
// deliberate change of this constant, tested like any other.
const APIVersion = "2026-08-26.dahlia"

// DefaultAPIBase is BILLING_STRIPE_API_BASE's default.
const DefaultAPIBase = "https://api.stripe.com"

// Ops of the errors the adapter returns.
const (
	chargeOp   = "stripe charge"
	customerOp = "stripe customer"
	lookupOp   = "stripe lookup"
)

// Header names Stripe uses.
const (
	headerVersion     = "Stripe-Version"
	headerShouldRetry = "Stripe-Should-Retry"
)

var (
	_ order.PaymentGateway = (*Client)(nil)
	_ order.PaymentRecords = (*Client)(nil)
)

// Client charges orders at Stripe and reads Stripe's records of them. Safe
// for concurrent use; make one per Stripe account and share it.
type Client struct {
	*httpgateway.Caller
	base    string // the API base, no trailing slash
	key     string // the secret key: sent in Authorization, never printed
	methods *methodCache
}

// Option configures a Client beyond the Caller's options.
type Option func(*Client)

// WithMethodCache sets how long a customer's default payment method is
// kept (DefaultMethodTTL when 0) and how many customers are kept at most
// (DefaultMethodCustomers when 0).
func WithMethodCache(ttl time.Duration, customers int) Option {
	return func(c *Client) { c.methods = newMethodCache(ttl, customers) }
}

// New returns a Client of the Stripe API at apiBase (DefaultAPIBase in
// production; stripe-mock or the stub in tests) with the secret key apiKey,
// each request bounded by timeout. opts are the Caller's (metrics, logger,
// tracer, TLS, idle connections); sopts the Client's own.
func New(apiBase, apiKey string, timeout time.Duration, opts []httpgateway.Option, sopts ...Option) (*Client, error) {
	base, err := checkBase(apiBase)
	if err != nil {
		return nil, fmt.Errorf("stripe client: BILLING_STRIPE_API_BASE: %w", err)
	}
	if err := checkKey(apiKey); err != nil {
		return nil, fmt.Errorf("stripe client: BILLING_STRIPE_API_KEY: %w", err)
	}
	caller, err := httpgateway.NewCaller(timeout, url.User(apiKey), opts...)
	if err != nil {
		return nil, err
	}
	c := &Client{Caller: caller, base: base, key: apiKey, methods: newMethodCache(0, 0)}
	for _, o := range sopts {
		o(c)
	}
	return c, nil
}

// checkBase accepts an absolute http(s) URL without user info, query or
// fragment, and returns it without a trailing slash.
func checkBase(raw string) (string, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("scheme %q, want http or https", u.Scheme)
	case u.Host == "":
		return "", errors.New("no host")
	case u.User != nil:
		return "", errors.New("has user info: the key goes in BILLING_STRIPE_API_KEY")
	case u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("has a query or fragment, want a plain base URL")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// CheckKey reports what is wrong with a Stripe secret key, nil when
// nothing: it must be a printable token without spaces (it is sent in a
// header). The error never repeats the key.
func CheckKey(key string) error { return checkKey(key) }

func checkKey(key string) error {
	if key == "" {
		return errors.New("required")
	}
	if len(key) > 1024 {
		return errors.New("longer than 1024 bytes")
	}
	for i := range len(key) {
		if key[i] <= 0x20 || key[i] > 0x7e {
			return errors.New("has spaces or characters that are not printable ASCII")
		}
	}
	return nil
}

// header returns the headers of every request.
func (c *Client) header() http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.key)
	h.Set(headerVersion, APIVersion)
	h.Set("Accept", "application/json")
	return h
}

// stripeError is Stripe's error object; only its tokens leave the adapter.
type stripeError struct {
	Error struct {
		Type string `json:"type"`
		Code string `json:"code"`
	} `json:"error"`
}

// errorTokens returns " (type/code)" of an error reply's body: Stripe's
// error type and code when they are short tokens, "" otherwise.
func errorTokens(raw []byte) (typ, code, text string) {
	var e stripeError
	if json.Unmarshal(raw, &e) != nil {
		return "", "", ""
	}
	typ, code = httpgateway.Token(e.Error.Type), httpgateway.Token(e.Error.Code)
	switch {
	case typ != "" && code != "":
		text = " (" + typ + "/" + code + ")"
	case typ != "":
		text = " (" + typ + ")"
	case code != "":
		text = " (" + code + ")"
	}
	return typ, code, text
}

// shouldRetry is Stripe-Should-Retry: +1 true, -1 false, 0 absent or other.
func shouldRetry(h http.Header) int {
	switch strings.ToLower(strings.TrimSpace(h.Get(headerShouldRetry))) {
	case "true":
		return 1
	case "false":
		return -1
	}
	return 0
}

// statusText is "402 Payment Required".
func statusText(status int) string { return strconv.Itoa(status) + " " + http.StatusText(status) }

// methodCache keeps each customer's default payment method for a while:
// read once, not for every charge (docs/interface.md §6). Bounded in time, so
// that a customer who changed their default card is charged on the new
// one within the TTL, and in size, so that a year of customers does not
// live in one pod's memory.
type methodCache struct {
	ttl time.Duration
	max int
	mu  sync.Mutex
	m   map[string]cachedMethod
}

type cachedMethod struct {
	id string
	at time.Time
}

// Defaults of the payment method cache.
const (
	DefaultMethodTTL       = time.Hour
	DefaultMethodCustomers = 10000
)

func newMethodCache(ttl time.Duration, customers int) *methodCache {
	if ttl <= 0 {
		ttl = DefaultMethodTTL
	}
	if customers <= 0 {
		customers = DefaultMethodCustomers
	}
	return &methodCache{ttl: ttl, max: customers, m: map[string]cachedMethod{}}
}

func (m *methodCache) get(customer string, now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[customer]
	if !ok || now.Sub(e.at) >= m.ttl {
		return "", false
	}
	return e.id, true
}

func (m *methodCache) put(customer, id string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= m.max {
		for k, e := range m.m {
			if now.Sub(e.at) >= m.ttl {
				delete(m.m, k)
			}
		}
		if len(m.m) >= m.max { // all fresh: start over rather than grow
			clear(m.m)
		}
	}
	m.m[customer] = cachedMethod{id: id, at: now}
}
