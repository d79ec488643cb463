package gatewaystub

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The stub's Stripe endpoints speak what Stripe documents for the calls
// billing makes, and what stripe-mock (which stores nothing) cannot show:
//
//   - GET /v1/customers/{id}: a customer whose
//     invoice_settings.default_payment_method is "pm_" + id; none for an
//     id starting with "nopm-"; 404 resource_missing for one starting with
//     "missing-". With expand[]=invoice_settings.default_payment_method,
//     the payment method as an object.
//   - POST /v1/payment_intents (form encoded), under an Idempotency-Key:
//     the first request of a key is executed (Options.Latency) and its
//     answer saved: 200 with the PaymentIntent (succeeded, or
//     Fault.PIStatus), or 402 card_error card_declined (DeclineIf) with
//     the PaymentIntent left in requires_payment_method. The same key with
//     the same parameters replays the saved answer with
//     Idempotent-Replayed: true; with other parameters, 400
//     idempotency_error; while the first is still executing, 409
//     idempotency_error idempotency_key_in_use. A request that fails
//     validation, or that RefuseIf refuses, is answered 400
//     invalid_request_error and saves nothing (Stripe: "no idempotent
//     result is saved because no API endpoint began execution").
//   - GET /v1/payment_intents?created[gte]=&created[lt]=&limit=&starting_after=:
//     the PaymentIntents, newest first, paged by starting_after.
//   - GET /v1/payment_intents/search?query=metadata['order_id']:'ID'&page=:
//     one order's, without those younger than Options.SearchLag.
//   - GET /v1/payment_intents/{id}: one, in its state now (SetIntentStatus).
//
// Every endpoint wants the API key (Options.StripeKey) as a bearer token
// or as the basic user name: 401 otherwise. A Fault with Status answers
// with Stripe's error object instead (its type from the status unless
// Fault.ErrorType says), plus Fault.Header (Stripe-Should-Retry).

// DefaultStripeKey is the API key the Stripe endpoints accept when
// Options.StripeKey is empty.
const DefaultStripeKey = "sk_test_stub"

// Stripe endpoints of the stub.
const (
	StripeCustomersPath      = "/v1/customers/"
	StripePaymentIntentsPath = "/v1/payment_intents"
	StripeSearchPath         = "/v1/payment_intents/search"
)

// PaymentIntent is the part of Stripe's PaymentIntent object the stub
// answers with.
type PaymentIntent struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	Created       int64             `json:"created"`
	Customer      string            `json:"customer"`
	PaymentMethod string            `json:"payment_method"`
	Metadata      map[string]string `json:"metadata"`
	LatestCharge  *string           `json:"latest_charge"`
	Livemode      bool              `json:"livemode"`
}

// stripeError is Stripe's error object.
type stripeError struct {
	Error stripeErrorBody `json:"error"`
}

type stripeErrorBody struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message,omitempty"`
	Param         string         `json:"param,omitempty"`
	PaymentIntent *PaymentIntent `json:"payment_intent,omitempty"`
}

// piKeyState is what the stub remembers of an Idempotency-Key of a
// PaymentIntent request that began executing.
type piKeyState struct {
	params   string // the request's parameters, canonical: another request under the key must bring the same
	inFlight bool
	status   int
	body     any
}

// serveStripe serves the endpoints under /v1/.
func (s *Stub) serveStripe(w http.ResponseWriter, r *http.Request) {
	call := Call{Key: r.Header.Get(HeaderIdempotencyKey), TraceParent: r.Header.Get(HeaderTraceParent), Time: time.Now()}
	var rep reply
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, StripeCustomersPath):
		call.Route = "GET " + StripeCustomersPath + "{id}"
		call.CustomerID = strings.TrimPrefix(r.URL.Path, StripeCustomersPath)
		rep = s.stripeGuard(r, call, func() reply { return s.stripeCustomer(call.CustomerID, r.URL.Query()) })
	case r.Method == http.MethodPost && r.URL.Path == StripePaymentIntentsPath:
		call.Route = "POST " + StripePaymentIntentsPath
		s.stripeCharge(w, r, call)
		return
	case r.Method == http.MethodGet && r.URL.Path == StripePaymentIntentsPath:
		call.Route = "GET " + StripePaymentIntentsPath
		rep = s.stripeGuard(r, call, func() reply { return s.stripeList(r.URL.Query()) })
	case r.Method == http.MethodGet && r.URL.Path == StripeSearchPath:
		call.Route = "GET " + StripeSearchPath
		rep = s.stripeGuard(r, call, func() reply { return s.stripeSearch(r.URL.Query()) })
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, StripePaymentIntentsPath+"/"):
		call.Route = "GET " + StripePaymentIntentsPath + "/{id}"
		rep = s.stripeGuard(r, call, func() reply { return s.stripeIntent(strings.TrimPrefix(r.URL.Path, StripePaymentIntentsPath+"/")) })
	default:
		rep = stripeFail(http.StatusNotFound, "invalid_request_error", "resource_missing", "Unrecognized request URL.")
	}
	s.finish(w, call, rep)
}

// stripeGuard checks the API key and the fault hook for a request that
// changes nothing, then answers it with answer.
func (s *Stub) stripeGuard(r *http.Request, call Call, answer func() reply) reply {
	if rep, ok := s.stripeAuth(r); !ok {
		return rep
	}
	s.mu.Lock()
	faultFn, latency := s.fault, s.latency
	s.mu.Unlock()
	var fault Fault
	if faultFn != nil {
		fault = faultFn(call, 0)
	}
	if !s.wait(r.Context(), latency+fault.Delay) {
		return reply{status: http.StatusServiceUnavailable, body: stripeError{Error: stripeErrorBody{Type: "api_error"}}}
	}
	if fault.Status != 0 {
		return stripeFault(fault)
	}
	return answer()
}

// stripeAuth answers 401 unless r carries the stub's API key.
func (s *Stub) stripeAuth(r *http.Request) (reply, bool) {
	key := ""
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		key = strings.TrimPrefix(h, "Bearer ")
	} else if u, _, ok := r.BasicAuth(); ok {
		key = u
	}
	if key != s.stripeKey {
		return stripeFail(http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided."), false
	}
	return reply{}, true
}

// stripeFault is the reply of an injected fault.
func stripeFault(f Fault) reply {
	typ := f.ErrorType
	if typ == "" {
		typ = stripeErrorType(f.Status)
	}
	rep := stripeFail(f.Status, typ, f.ErrorCode, "injected fault")
	rep.header = f.Header
	return rep
}

// stripeErrorType is the type Stripe gives an error of status.
func stripeErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_request_error"
	case status == http.StatusPaymentRequired:
		return "card_error"
	case status == http.StatusForbidden:
		return "invalid_request_error"
	case status == http.StatusConflict:
		return "idempotency_error"
	case status == http.StatusTooManyRequests:
		return "invalid_request_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

func stripeFail(status int, typ, code, msg string) reply {
	return reply{status: status, body: stripeError{Error: stripeErrorBody{Type: typ, Code: code, Message: msg}}}
}

// stripeCustomer answers GET /v1/customers/{id}.
func (s *Stub) stripeCustomer(id string, q url.Values) reply {
	if id == "" || strings.HasPrefix(id, "missing-") {
		return stripeFail(http.StatusNotFound, "invalid_request_error", "resource_missing", "No such customer: '"+id+"'")
	}
	var pm any
	if !strings.HasPrefix(id, "nopm-") {
		pm = "pm_" + id
		if slices.Contains(q["expand[]"], "invoice_settings.default_payment_method") {
			pm = map[string]any{"id": "pm_" + id, "object": "payment_method", "type": "card"}
		}
	}
	return reply{status: http.StatusOK, body: map[string]any{
		"id": id, "object": "customer", "livemode": false,
		"invoice_settings": map[string]any{"default_payment_method": pm, "custom_fields": nil, "footer": nil},
	}}
}

// stripeCharge answers POST /v1/payment_intents.
func (s *Stub) stripeCharge(w http.ResponseWriter, r *http.Request, call Call) {
	if rep, ok := s.stripeAuth(r); !ok {
		s.finish(w, call, rep)
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		s.finish(w, call, stripeFail(http.StatusBadRequest, "invalid_request_error", "", "cannot read the request body"))
		return
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		s.finish(w, call, stripeFail(http.StatusBadRequest, "invalid_request_error", "", "the body must be form encoded"))
		return
	}
	body := Body{OrderID: form.Get("metadata[order_id]"), CustomerID: form.Get("customer"), Currency: strings.ToUpper(form.Get("currency"))}
	body.Amount, _ = strconv.ParseInt(form.Get("amount"), 10, 64)
	call.OrderID, call.CustomerID, call.Amount, call.Currency = body.OrderID, body.CustomerID, body.Amount, body.Currency
	if msg, param := validateStripe(call.Key, form); msg != "" {
		s.finish(w, call, reply{status: http.StatusBadRequest, body: stripeError{Error: stripeErrorBody{
			Type: "invalid_request_error", Code: "parameter_invalid", Message: msg, Param: param}}})
		return
	}

	fault, wait, ok := s.admit(call)
	if !ok {
		return
	}
	if fault.Status != 0 {
		if s.wait(r.Context(), wait) {
			s.finish(w, call, stripeFault(fault))
		}
		return
	}
	if s.refuseIf(body) {
		if s.wait(r.Context(), wait) {
			s.finish(w, call, stripeFail(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such PaymentMethod"))
		}
		return
	}
	rep := s.executePI(r.Context(), call.Key, form, body, wait, fault.PIStatus)
	switch {
	case rep.status == 0:
	case fault.ResetAfterCharge:
		s.reset(w, call, rep)
	default:
		rep.header = fault.Header
		s.finish(w, call, rep)
	}
}

// validateStripe says what Stripe would refuse in a request, "" when
// nothing, and the parameter.
func validateStripe(key string, f url.Values) (msg, param string) {
	switch {
	case key == "":
		return "this stub wants an Idempotency-Key on every PaymentIntent", ""
	case len(key) > maxKeyBytes:
		return "Idempotency-Key longer than 255 characters", ""
	}
	if n, err := strconv.ParseInt(f.Get("amount"), 10, 64); err != nil || n <= 0 {
		return "amount must be a positive integer", "amount"
	}
	if c := f.Get("currency"); len(c) != 3 || strings.ToLower(c) != c {
		return "currency must be a three-letter code in lower case", "currency"
	}
	for _, p := range []string{"customer", "payment_method", "metadata[order_id]", "metadata[event_id]"} {
		if f.Get(p) == "" {
			return "missing " + p, p
		}
	}
	if f.Get("confirm") != "true" || f.Get("off_session") != "true" {
		return "billing's charges are confirmed off session", "confirm"
	}
	return "", ""
}

// executePI applies Stripe's idempotency rules to a valid request and, for
// the first request of its key, creates the PaymentIntent.
func (s *Stub) executePI(ctx context.Context, key string, form url.Values, body Body, wait time.Duration, piStatus string) reply {
	params := form.Encode() // sorted by name: the same parameters give the same string
	s.mu.Lock()
	st, seen := s.piKeys[key]
	if !seen {
		st = &piKeyState{params: params, inFlight: true}
		s.piKeys[key] = st
	}
	s.mu.Unlock()
	if seen {
		if !s.wait(ctx, wait) {
			return reply{}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case st.inFlight:
			return stripeFail(http.StatusConflict, "idempotency_error", "idempotency_key_in_use",
				"There is currently another in-progress request using this Idempotent Key.")
		case st.params != params:
			return stripeFail(http.StatusBadRequest, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with.")
		}
		return reply{status: st.status, body: st.body, replayed: true}
	}
	// As in execute: the first request of the key runs to the end even if
	// the client hangs up.
	if !s.wait(context.WithoutCancel(ctx), wait) {
		return reply{}
	}
	declined := s.declineIf(body)
	now := time.Now()
	pi := PaymentIntent{ID: newStripeID("pi_"), Object: "payment_intent", Amount: body.Amount,
		Currency: strings.ToLower(body.Currency), Status: "succeeded", Created: now.Unix(), Customer: body.CustomerID,
		PaymentMethod: form.Get("payment_method"),
		Metadata:      map[string]string{"order_id": body.OrderID, "event_id": form.Get("metadata[event_id]")}}
	rep := reply{status: http.StatusOK}
	switch {
	case declined:
		pi.Status = "requires_payment_method"
		rep.status = http.StatusPaymentRequired
		rep.body = stripeError{Error: stripeErrorBody{Type: "card_error", Code: "card_declined", DeclineCode: "generic_decline",
			Message: "Your card was declined.", PaymentIntent: &pi}}
	case piStatus != "":
		pi.Status = piStatus
		rep.body = pi
	default:
		charge := newStripeID("ch_")
		pi.LatestCharge = &charge
		rep.body = pi
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.inFlight, st.status, st.body = false, rep.status, rep.body
	s.recordAttempt(Attempt{ID: pi.ID, Key: key, OrderID: body.OrderID, CustomerID: body.CustomerID,
		Amount: body.Amount, Currency: body.Currency, Status: pi.Status, Time: now})
	return rep
}

// stripeIntent answers GET /v1/payment_intents/{id}: the PaymentIntent as
// it is now (SetIntentStatus), not as its creation answered.
func (s *Stub) stripeIntent(id string) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.attempts {
		if a.ID == id {
			return reply{status: http.StatusOK, body: intentOf(a)}
		}
	}
	return stripeFail(http.StatusNotFound, "invalid_request_error", "resource_missing", "No such payment_intent: '"+id+"'")
}

// SetIntentStatus moves the PaymentIntent id to status (a processing one
// that succeeded at last, say), as GET /v1/payment_intents/{id}, the list
// and the search show it; the answer saved under its key does not change,
// as at Stripe. It reports whether the stub has that PaymentIntent.
func (s *Stub) SetIntentStatus(id, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.attempts {
		if a.ID == id {
			s.attempts[i].Status = status
			if status == AttemptSucceeded && a.Status != AttemptSucceeded {
				s.charges = append(s.charges, Charge{ID: a.ID, Key: a.Key, OrderID: a.OrderID, CustomerID: a.CustomerID,
					Amount: a.Amount, Currency: a.Currency, Time: a.Time})
			}
			return true
		}
	}
	return false
}

// stripeList answers GET /v1/payment_intents: newest first, created[gte]
// and created[lt] in Unix seconds, limit (10 by default, at most 100),
// starting_after the last id of the previous page.
func (s *Stub) stripeList(q url.Values) reply {
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return stripeFail(http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "limit must be 1 to 100")
		}
		limit = n
	}
	limit = min(limit, s.pageSize)
	gte, lt := int64(0), int64(1<<62)
	for name, dst := range map[string]*int64{"created[gte]": &gte, "created[lt]": &lt} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return stripeFail(http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", name+" must be an integer")
			}
			*dst = n
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []PaymentIntent
	for i := len(s.attempts) - 1; i >= 0; i-- { // newest first
		a := s.attempts[i]
		if c := a.Time.Unix(); c >= gte && c < lt && strings.HasPrefix(a.ID, "pi_") {
			match = append(match, intentOf(a))
		}
	}
	if after := q.Get("starting_after"); after != "" {
		i := slices.IndexFunc(match, func(p PaymentIntent) bool { return p.ID == after })
		if i < 0 {
			return stripeFail(http.StatusBadRequest, "invalid_request_error", "resource_missing", "No such payment_intent: '"+after+"'")
		}
		match = match[i+1:]
	}
	more := len(match) > limit
	if more {
		match = match[:limit]
	}
	return reply{status: http.StatusOK, body: map[string]any{"object": "list", "url": StripePaymentIntentsPath,
		"has_more": more, "data": nonNil(match)}}
}

// stripeSearch answers GET /v1/payment_intents/search for the one query
// billing makes: metadata['order_id']:'ID'.
func (s *Stub) stripeSearch(q url.Values) reply {
	query := q.Get("query")
	const prefix, suffix = "metadata['order_id']:'", "'"
	if !strings.HasPrefix(query, prefix) || !strings.HasSuffix(query, suffix) || len(query) < len(prefix)+len(suffix) {
		return stripeFail(http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "this stub searches by metadata['order_id'] only")
	}
	orderID := strings.ReplaceAll(query[len(prefix):len(query)-len(suffix)], `\'`, `'`)
	limit := min(10, s.pageSize)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return stripeFail(http.StatusBadRequest, "invalid_request_error", "parameter_invalid_integer", "limit must be 1 to 100")
		}
		limit = min(n, s.pageSize)
	}
	start := 0
	if p := q.Get("page"); p != "" {
		b, err := base64.RawURLEncoding.DecodeString(p)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 {
			return stripeFail(http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "page is not one this stub gave")
		}
		start = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := time.Now().Add(-s.searchLag)
	var match []PaymentIntent
	for i := len(s.attempts) - 1; i >= 0; i-- {
		if a := s.attempts[i]; a.OrderID == orderID && strings.HasPrefix(a.ID, "pi_") && !a.Time.After(seen) {
			match = append(match, intentOf(a))
		}
	}
	total := len(match)
	match = match[min(start, len(match)):]
	var next *string
	if len(match) > limit {
		match = match[:limit]
		p := base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(start + limit)))
		next = &p
	}
	return reply{status: http.StatusOK, body: map[string]any{"object": "search_result", "url": StripeSearchPath,
		"has_more": next != nil, "next_page": next, "total_count": total, "data": nonNil(match)}}
}

func nonNil(p []PaymentIntent) []PaymentIntent {
	if p == nil {
		return []PaymentIntent{}
	}
	return p
}

// intentOf is the PaymentIntent of a recorded attempt.
func intentOf(a Attempt) PaymentIntent {
	return PaymentIntent{ID: a.ID, Object: "payment_intent", Amount: a.Amount, Currency: strings.ToLower(a.Currency),
		Status: a.Status, Created: a.Time.Unix(), Customer: a.CustomerID,
		Metadata: map[string]string{"order_id": a.OrderID, "event_id": a.Key}}
}

// newStripeID returns prefix and 24 random characters, as Stripe's ids.
func newStripeID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return prefix + hex.EncodeToString(b[:])
}
