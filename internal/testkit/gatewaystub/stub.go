// Package gatewaystub is an in-process fake of the payment gateway of
// docs/interface.md §6: a real HTTP server on the loopback interface that charges,
// declines, refuses and replays per Idempotency-Key the way Stripe and the
// IETF Idempotency-Key draft do, records every call and every attempt
// (kept longer than any key, and served by the lookup and the list), and
// injects faults (5xx, slow replies, a connection reset after the charge,
// a key forgotten) on demand. The same stub speaks Stripe's PaymentIntents
// API under /v1/ (stripe.go). Tests, the end-to-end suite, benchmarks and
// `billing demo` point the service at it.
package gatewaystub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Path is the one endpoint the stub serves.
const Path = "/charges"

// Header names of the idempotency protocol.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
	HeaderTraceParent    = "traceparent"
)

const (
	maxBodyBytes = 1 << 20
	maxKeyBytes  = 255
)

// Body is the JSON body of a charge request.
type Body struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// Options configures a Stub. The zero value is a fast, healthy gateway.
type Options struct {
	// Latency is how long the gateway takes to answer each request; a
	// request that charges holds its key in flight that long.
	Latency time.Duration
	// DeclineIf decides whether a charge is declined (402). It runs while
	// the request's key is in flight. Default: the customer id starts with
	// "declined-".
	DeclineIf func(Body) bool
	// Logger receives one debug line per call. Default: discard.
	Logger *slog.Logger
	// NoCallLog leaves Calls empty. A benchmark's stub answers hundreds of
	// thousands of requests, and the log would cost it memory and GC time
	// that a remote gateway never takes from the machine being measured.
	// Charges still records every charge.
	NoCallLog bool
	// RefuseIf decides whether a valid request is refused without being
	// executed (400 invalid_customer; at Stripe, a 400 invalid_request_error):
	// nothing is remembered under its key, and the attempt is recorded as
	// refused. Default: the customer id starts with "refused-".
	RefuseIf func(Body) bool
	// PageSize is how many records one page of the list holds (100 when 0).
	PageSize int
	// SearchLag is how long a Stripe PaymentIntent stays out of the search
	// (/v1/payment_intents/search) after it is created: Stripe's search is
	// eventually consistent. The list and the generic lookup are not.
	SearchLag time.Duration
	// StripeKey is the API key the Stripe endpoints accept ("sk_test_stub"
	// when empty); any other is refused with a 401.
	StripeKey string
}

// Call is one request the stub answered (or hung up on).
type Call struct {
	Key         string // Idempotency-Key header
	OrderID     string
	CustomerID  string
	Amount      int64
	Currency    string
	Status      int    // status code returned; 0 when the connection was reset instead
	Replayed    bool   // answered from an earlier request with the same key
	TraceParent string // traceparent header, "" when absent
	Time        time.Time
	// Route is the endpoint: "POST /charges", "GET /charges",
	// "POST /v1/payment_intents", "GET /v1/customers/{id}"…
	Route string
}

// Charge is one successful charge: what a real gateway would have taken
// from the customer.
type Charge struct {
	ID         string
	Key        string
	OrderID    string
	CustomerID string
	Amount     int64
	Currency   string
	Time       time.Time
}

// Attempt statuses of the lookup and the list (docs/interface.md §6).
const (
	AttemptSucceeded = "succeeded"
	AttemptDeclined  = "declined"
	AttemptRefused   = "refused"
)

// Attempt is one attempt the gateway recorded: every executed charge
// (succeeded or declined) and every refusal (RefuseIf), under any key, kept
// for as long as the stub lives, longer than any key (Forget). The lookup
// and the list serve them.
type Attempt struct {
	ID         string // ch_… (generic) or pi_… (Stripe)
	Key        string
	OrderID    string
	CustomerID string
	Amount     int64
	Currency   string // upper case
	Status     string // AttemptSucceeded, AttemptDeclined, AttemptRefused; at Stripe the PaymentIntent's status
	Time       time.Time
}

// Fault is what to do to one request instead of answering it normally. The
// zero Fault is no fault.
type Fault struct {
	// Status, when not 0, is returned without charging or remembering
	// anything, as a load balancer or an overloaded front end would.
	Status int
	// ResetAfterCharge performs the request normally (charging if it is the
	// first for its key), then resets the TCP connection (SO_LINGER 0)
	// instead of answering: the client sees an error and no reply.
	ResetAfterCharge bool
	// Delay is added to this request's latency.
	Delay time.Duration
	// EchoRequest, with Status, makes the error message repeat the
	// request's headers, Authorization first, as a gateway's debug output
	// (or a proxy's error page) might: what a hostile or careless gateway
	// does with the service's credentials. StartLean's server keeps no
	// headers to echo.
	EchoRequest bool
	// Header is added to the reply (with Status: Stripe-Should-Retry,
	// Retry-After).
	Header map[string]string
	// ErrorType and ErrorCode, with Status on a Stripe endpoint, replace
	// the error's type (derived from Status when empty) and code.
	ErrorType, ErrorCode string
	// PIStatus, on a Stripe charge, executes it as usual and gives the
	// PaymentIntent this status (processing, requires_action, canceled…)
	// instead of succeeded: remembered under its key like any result.
	PIStatus string
}

// keyState is what the stub remembers of an Idempotency-Key whose request
// began executing (validation failures and injected statuses are not
// remembered, as at Stripe).
type keyState struct {
	body     Body
	inFlight bool
	status   int    // final status: http.StatusCreated or http.StatusPaymentRequired
	chargeID string // when status is 201
}

// Stub is a fake payment gateway. It is an http.Handler, so it can also be
// mounted on a server of the caller's; Start runs it on a loopback port of
// its own. Safe for concurrent use.
type Stub struct {
	declineIf func(Body) bool
	refuseIf  func(Body) bool
	pageSize  int
	searchLag time.Duration
	stripeKey string
	log       *slog.Logger
	noCallLog bool
	done      chan struct{} // closed by Close: ends every wait
	closeOnce sync.Once

	lean leanServer // StartLean's server, instead of srv

	mu       sync.Mutex
	latency  time.Duration
	fault    func(Call, int) Fault
	hold     chan struct{} // non-nil while Hold holds requests: closed by its release
	held     int           // requests waiting on a hold
	keys     map[string]*keyState
	requests map[string]int // requests seen per key, for Fault
	calls    []Call
	charges  []Charge
	attempts []Attempt
	piKeys   map[string]*piKeyState // Stripe: what each Idempotency-Key of a PaymentIntent gave
	srv      *http.Server
	serveErr chan error
}

// New returns a Stub configured by opts; Start serves it.
func New(opts Options) *Stub {
	s := &Stub{
		declineIf: opts.DeclineIf,
		log:       opts.Logger,
		noCallLog: opts.NoCallLog,
		done:      make(chan struct{}),
		latency:   opts.Latency,
		keys:      map[string]*keyState{},
		requests:  map[string]int{},
		piKeys:    map[string]*piKeyState{},
		refuseIf:  opts.RefuseIf,
		pageSize:  opts.PageSize,
		searchLag: opts.SearchLag,
		stripeKey: opts.StripeKey,
	}
	if s.declineIf == nil {
		s.declineIf = func(b Body) bool { return strings.HasPrefix(b.CustomerID, "declined-") }
	}
	if s.refuseIf == nil {
		s.refuseIf = func(b Body) bool { return strings.HasPrefix(b.CustomerID, "refused-") }
	}
	if s.pageSize <= 0 {
		s.pageSize = 100
	}
	if s.stripeKey == "" {
		s.stripeKey = DefaultStripeKey
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// listen opens the stub's loopback listener, once: Start and StartLean
// call it with s.mu held.
func (s *Stub) listen() (net.Listener, error) {
	if s.srv != nil || s.lean.started() {
		return nil, errors.New("gateway stub: already started")
	}
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway stub: listen: %w", err)
	}
	return ln, nil
}

// Start serves the stub on 127.0.0.1 at a free port and returns its base
// URL ("http://127.0.0.1:PORT"). Call it once.
func (s *Stub) Start() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln, err := s.listen()
	if err != nil {
		return "", err
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.serveErr = make(chan error, 1)
	go func() { s.serveErr <- s.srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// closeTimeout bounds how long Close waits for handlers to return; only a
// DeclineIf or fault function that blocks can make them that slow.
const closeTimeout = 5 * time.Second

// Close stops the server: it ends any latency being waited out, waits for
// the handlers to return (at most closeTimeout) and closes every connection.
// Safe to call more than once, and without Start.
func (s *Stub) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.lean.close()
		s.mu.Lock()
		srv, serveErr := s.srv, s.serveErr
		s.mu.Unlock()
		if srv == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			s.log.Warn("gateway stub: handlers still running at close", slog.Any("error", err))
			_ = srv.Close()
		}
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("gateway stub: serve", slog.Any("error", err))
		}
	})
}

// SetLatency changes Options.Latency for the requests that arrive from now on.
func (s *Stub) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// SetFault installs f, called for every valid request (a 400 is answered
// before it) with the call (Status not yet known) and n, the 1-based number
// of valid requests seen so far with that Idempotency-Key, this one included. nil removes the fault injection. f runs outside the
// stub's lock, so it may block or call the stub.
func (s *Stub) SetFault(f func(c Call, n int) Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// InFlight reports whether a request under key has begun its charge and
// not yet ended it: the state in which another request under the same key
// is answered 409 (generic API) or idempotency_key_in_use (Stripe's). The
// fault hook runs before that state begins, so a test that wants a second
// request to meet it waits for InFlight, not for the hook.
func (s *Stub) InFlight(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.keys[key]; ok && st.inFlight {
		return true
	}
	st, ok := s.piKeys[key]
	return ok && st.inFlight
}

// Hold makes every valid request that arrives from now on wait, before the
// stub executes it, until release is called (or the stub closes): a gateway
// that has the charge request and has not answered it. A held request is
// then executed as usual, even if its client has left meanwhile (a real
// gateway does not know the client died), so a test can kill the service
// while its charges are held and find them executed when it comes back.
// release may be called more than once; Held counts the waiting requests.
func (s *Stub) Hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == ch {
				s.hold = nil
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Held returns how many requests are waiting on Hold's release.
func (s *Stub) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Calls returns every call answered so far, in the order they finished
// (none with Options.NoCallLog).
func (s *Stub) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Charges returns the distinct successful charges, one per key that charged,
// in the order they were made.
func (s *Stub) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Charge(nil), s.charges...)
}

// ChargesForOrder returns the successful charges for one order id; more
// than one means the order was charged twice.
func (s *Stub) ChargesForOrder(orderID string) []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Charge
	for _, c := range s.charges {
		if c.OrderID == orderID {
			out = append(out, c)
		}
	}
	return out
}

// Attempts returns every attempt recorded so far, in the order they were
// made.
func (s *Stub) Attempts() []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Attempt(nil), s.attempts...)
}

// Plant records a as if the gateway had made it (its Time, when zero, is
// now; its ID, when empty, a new one): money taken outside billing, or by
// a key billing no longer knows. A succeeded one counts in Charges too.
func (s *Stub) Plant(a Attempt) Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Time.IsZero() {
		a.Time = time.Now()
	}
	if a.ID == "" {
		a.ID = newChargeID()
	}
	s.attempts = append(s.attempts, a)
	slices.SortStableFunc(s.attempts, func(x, y Attempt) int { return x.Time.Compare(y.Time) })
	if a.Status == AttemptSucceeded {
		s.charges = append(s.charges, Charge{ID: a.ID, Key: a.Key, OrderID: a.OrderID, CustomerID: a.CustomerID,
			Amount: a.Amount, Currency: a.Currency, Time: a.Time})
	}
	return a
}

// Forget makes the gateway forget key, as a real one does once the key's
// lifetime has passed: the next request under it is executed as new. The
// attempts made under it stay recorded.
func (s *Stub) Forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
	delete(s.piKeys, key)
}

// recordAttempt appends a; the caller holds s.mu.
func (s *Stub) recordAttempt(a Attempt) {
	s.attempts = append(s.attempts, a)
	if a.Status == AttemptSucceeded {
		s.charges = append(s.charges, Charge{ID: a.ID, Key: a.Key, OrderID: a.OrderID, CustomerID: a.CustomerID,
			Amount: a.Amount, Currency: a.Currency, Time: a.Time})
	}
}

// reply is an answer the handler is about to write.
type reply struct {
	status   int
	body     any
	replayed bool
	header   map[string]string
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

type chargeBody struct {
	ChargeID string `json:"charge_id,omitempty"`
	Status   string `json:"status"`
}

// ServeHTTP implements POST /charges, the lookup and the list (GET
// /charges), and Stripe's endpoints under /v1/ (stripe.go).
func (s *Stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		s.serveStripe(w, r)
		return
	}
	if r.URL.Path != Path {
		writeJSON(w, reply{status: http.StatusNotFound, body: errorBody{Error: "not_found"}})
		return
	}
	if r.Method == http.MethodGet {
		s.serveList(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		writeJSON(w, reply{status: http.StatusMethodNotAllowed, body: errorBody{Error: "method_not_allowed"}})
		return
	}

	call := Call{
		Route:       "POST " + Path,
		Key:         r.Header.Get(HeaderIdempotencyKey),
		TraceParent: r.Header.Get(HeaderTraceParent),
		Time:        time.Now(),
	}
	body, msg := readBody(w, r)
	call.OrderID, call.CustomerID, call.Amount, call.Currency = body.OrderID, body.CustomerID, body.Amount, body.Currency
	if msg == "" {
		msg = validate(call.Key, body)
	}
	if msg != "" {
		s.finish(w, call, invalid(msg))
		return
	}

	rep, reset := s.charge(r.Context(), call, body, r.Header)
	switch {
	case rep.status == 0: // closed or client gone while waiting
	case reset:
		s.reset(w, call, rep)
	default:
		s.finish(w, call, rep)
	}
}

// charge runs a valid request: counts it, asks the fault hook, waits the
// latency and applies the idempotency rules. It returns the reply, with
// status 0 when there is none to give (the stub closed, or the client left
// while waiting), and whether the connection is to be reset instead.
func (s *Stub) charge(ctx context.Context, call Call, body Body, hdr http.Header) (reply, bool) {
	fault, wait, ok := s.admit(call)
	if !ok {
		return reply{}, false
	}
	if fault.Status != 0 {
		if !s.wait(ctx, wait) {
			return reply{}, false
		}
		msg := http.StatusText(fault.Status)
		if fault.EchoRequest {
			msg = echo(hdr)
		}
		return reply{status: fault.Status, body: errorBody{Error: "injected_fault", Message: msg}, header: fault.Header}, false
	}
	if s.refuseIf(body) {
		if !s.wait(ctx, wait) {
			return reply{}, false
		}
		s.mu.Lock()
		s.recordAttempt(Attempt{ID: newChargeID(), Key: call.Key, OrderID: body.OrderID, CustomerID: body.CustomerID,
			Amount: body.Amount, Currency: body.Currency, Status: AttemptRefused, Time: time.Now()})
		s.mu.Unlock()
		return reply{status: http.StatusBadRequest, body: errorBody{Error: "invalid_customer"}}, false
	}
	rep := s.execute(ctx, call.Key, body, wait)
	return rep, fault.ResetAfterCharge && rep.status != 0
}

// admit counts a valid charge request under its key, waits out a Hold,
// and asks the fault hook: the fault to apply and how long to take. ok is
// false when the stub closed meanwhile.
func (s *Stub) admit(call Call) (fault Fault, wait time.Duration, ok bool) {
	s.mu.Lock()
	s.requests[call.Key]++
	n, faultFn, latency, hold := s.requests[call.Key], s.fault, s.latency, s.hold
	if hold != nil {
		s.held++
	}
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold: // the client may have left: the request runs anyway (Hold)
		case <-s.done:
		}
		s.mu.Lock()
		s.held--
		s.mu.Unlock()
		select {
		case <-s.done:
			return Fault{}, 0, false
		default:
		}
	}
	if faultFn != nil {
		fault = faultFn(call, n)
	}
	return fault, latency + fault.Delay, true
}

// echo renders request headers as a debug dump, Authorization first.
func echo(h http.Header) string {
	var b strings.Builder
	b.WriteString("request headers: Authorization: " + h.Get("Authorization"))
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString("; " + k + ": " + strings.Join(h[k], ", "))
	}
	return b.String()
}

// execute applies the idempotency rules and, for the first request of a
// key, charges or declines. It returns a reply with status 0 when the stub
// closed (or, for a request that does not charge, the client left) first.
func (s *Stub) execute(ctx context.Context, key string, body Body, wait time.Duration) reply {
	s.mu.Lock()
	st, seen := s.keys[key]
	if !seen {
		st = &keyState{body: body, inFlight: true}
		s.keys[key] = st
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
			return reply{status: http.StatusConflict, body: errorBody{Error: "in_progress",
				Message: "a request with this Idempotency-Key is still being processed"},
				header: map[string]string{"Retry-After": "1"}}
		case st.body != body:
			return reply{status: http.StatusUnprocessableEntity, body: errorBody{Error: "idempotency_key_reused",
				Message: "this Idempotency-Key was used with a different request body"}}
		default:
			return finalReply(st, true)
		}
	}

	// The first request of the key: it runs to the end even if the client
	// hangs up, as a real gateway's would, so that a timeout can leave a
	// charge behind for the retry to find.
	if !s.wait(context.WithoutCancel(ctx), wait) {
		return reply{}
	}
	declined := s.declineIf(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	st.inFlight = false
	a := Attempt{ID: newChargeID(), Key: key, OrderID: body.OrderID, CustomerID: body.CustomerID,
		Amount: body.Amount, Currency: body.Currency, Status: AttemptSucceeded, Time: time.Now()}
	if declined {
		st.status, a.Status = http.StatusPaymentRequired, AttemptDeclined
	} else {
		st.status, st.chargeID = http.StatusCreated, a.ID
	}
	s.recordAttempt(a)
	return finalReply(st, false)
}

// finalReply is the answer for a key whose request finished; a replay of a
// success is a 200, as at Stripe, where the first answer was a 201.
func finalReply(st *keyState, replayed bool) reply {
	if st.status == http.StatusPaymentRequired {
		return reply{status: http.StatusPaymentRequired, replayed: replayed,
			body: errorBody{Error: "card_declined", Message: "the customer's payment method was declined"}}
	}
	status := http.StatusCreated
	if replayed {
		status = http.StatusOK
	}
	return reply{status: status, replayed: replayed, body: chargeBody{ChargeID: st.chargeID, Status: "succeeded"}}
}

// wait waits d, or until ctx is done or the stub closes; it reports whether
// the whole of d passed.
func (s *Stub) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.done:
			return false
		default:
			return ctx.Err() == nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// finish writes rep and records the call.
func (s *Stub) finish(w http.ResponseWriter, call Call, rep reply) {
	call.Status, call.Replayed = rep.status, rep.replayed
	s.record(call)
	writeJSON(w, rep)
}

// reset records the call, then drops the connection with a TCP RST and no
// reply (SO_LINGER 0 makes Close send RST instead of FIN).
func (s *Stub) reset(w http.ResponseWriter, call Call, rep reply) {
	call.Replayed = rep.replayed
	s.record(call) // Status 0: nothing was returned
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // not a plain HTTP/1 connection: abort it as best we can
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (s *Stub) record(call Call) {
	if !s.noCallLog {
		s.mu.Lock()
		s.calls = append(s.calls, call)
		s.mu.Unlock()
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) { // the attributes cost the benchmark's stub CPU
		s.log.Debug("gateway stub call", slog.String("key", call.Key), slog.String("order_id", call.OrderID),
			slog.Int("status", call.Status), slog.Bool("replayed", call.Replayed))
	}
}

func writeJSON(w http.ResponseWriter, rep reply) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	for k, v := range rep.header {
		h.Set(k, v)
	}
	if rep.replayed {
		h.Set(HeaderReplayed, "true")
	}
	w.WriteHeader(rep.status)
	_ = json.NewEncoder(w).Encode(rep.body) // a write error means the client left
}

const tooLarge = "request body over 1 MiB"

// invalid is the reply to a request that says msg is wrong with it.
func invalid(msg string) reply {
	rep := reply{status: http.StatusBadRequest, body: errorBody{Error: "invalid_request", Message: msg}}
	if msg == tooLarge {
		rep.status = http.StatusRequestEntityTooLarge
	}
	return rep
}

// readBody decodes the request body; the message says why it could not.
func readBody(w http.ResponseWriter, r *http.Request) (Body, string) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return Body{}, tooLarge
		}
		return Body{}, "cannot read request body"
	}
	return parseBody(r.Header.Get("Content-Type"), raw)
}

// parseBody decodes a request body of content type ct.
func parseBody(ct string, raw []byte) (Body, string) {
	if !strings.HasPrefix(ct, "application/json") {
		return Body{}, "Content-Type must be application/json"
	}
	var b Body
	if err := json.Unmarshal(raw, &b); err != nil {
		return Body{}, "request body is not a JSON charge object"
	}
	return b, ""
}

// validate says what is wrong with a request, "" when nothing.
func validate(key string, b Body) string {
	switch {
	case key == "":
		return "missing Idempotency-Key header"
	case len(key) > maxKeyBytes:
		return "Idempotency-Key longer than 255 characters"
	case strings.TrimSpace(b.OrderID) == "":
		return "order_id is required"
	case strings.TrimSpace(b.CustomerID) == "":
		return "customer_id is required"
	case b.Amount <= 0:
		return "amount must be a positive integer"
	case len(b.Currency) != 3:
		return "currency must be a three-letter code"
	}
	return ""
}

func newChargeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "ch_" + hex.EncodeToString(b[:])
}
