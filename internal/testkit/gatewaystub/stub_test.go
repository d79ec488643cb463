package gatewaystub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/acme/billing/internal/testkit/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start runs a stub for one test and closes it at the end.
func start(t *testing.T, opts Options) (*Stub, string) {
	t.Helper()
	return startOn(t, opts, (*Stub).Start)
}

// startFunc starts a stub for one test: start, or the same on StartLean.
type startFunc func(*testing.T, Options) (*Stub, string)

func startOn(t *testing.T, opts Options, serve func(*Stub) (string, error)) (*Stub, string) {
	t.Helper()
	s := New(opts)
	base, err := serve(s)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Close)
	return s, base
}

// forBothServers runs test against a stub served by net/http (Start) and by
// the lean server (StartLean): both must behave the same.
func forBothServers(t *testing.T, test func(*testing.T, startFunc)) {
	t.Parallel()
	servers := map[string]func(*Stub) (string, error){"net-http": (*Stub).Start, "lean": (*Stub).StartLean}
	for name, serve := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, func(t *testing.T, opts Options) (*Stub, string) { t.Helper(); return startOn(t, opts, serve) })
		})
	}
}

// newHTTPClient returns a client with a transport of its own that keeps no
// idle connections, so that no test depends on connection reuse (a reused
// connection lets net/http replay a request that carries an Idempotency-Key).
func newHTTPClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

// post sends one charge request with a JSON body (raw when body is a string).
func post(ctx context.Context, c *http.Client, base, key string, body any, hdr map[string]string) (response, error) {
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return response{}, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+Path, bytes.NewReader(raw))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	out := response{status: resp.StatusCode, header: resp.Header}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(data, &out.body); err != nil {
		return out, fmt.Errorf("reply body %q: %w", data, err)
	}
	return out, nil
}

// mustPost is post for requests that must get a reply.
func mustPost(t *testing.T, c *http.Client, base, key string, body any, hdr map[string]string) response {
	t.Helper()
	r, err := post(context.Background(), c, base, key, body, hdr)
	if err != nil {
		t.Fatalf("POST key %q: %v", key, err)
	}
	return r
}

func body(order, customer string) Body {
	return Body{OrderID: order, CustomerID: customer, Amount: 12990, Currency: "EUR"}
}

func statuses(calls []Call) []int {
	out := make([]int, len(calls))
	for i, c := range calls {
		out[i] = c.Status
	}
	return out
}

func TestChargeThenReplay(t *testing.T) { forBothServers(t, testChargeThenReplay) }

func testChargeThenReplay(t *testing.T, start startFunc) {
	s, base := start(t, Options{})
	c := newHTTPClient(t)
	const key = "0190f8a4-6c1e-7b3a-9d2f-3c4e5a6b7c8d"
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	first := mustPost(t, c, base, key, body("ord-1", "cus-1"), map[string]string{HeaderTraceParent: tp})
	if first.status != http.StatusCreated || first.body["status"] != "succeeded" {
		t.Fatalf("first reply = %d %v, want 201 succeeded", first.status, first.body)
	}
	id, _ := first.body["charge_id"].(string)
	if !strings.HasPrefix(id, "ch_") {
		t.Fatalf("charge_id = %q, want ch_…", id)
	}
	if got := first.header.Get(HeaderReplayed); got != "" {
		t.Errorf("first reply %s = %q, want none", HeaderReplayed, got)
	}

	second := mustPost(t, c, base, key, body("ord-1", "cus-1"), nil)
	if second.status != http.StatusOK || second.body["charge_id"] != id || second.body["status"] != "succeeded" {
		t.Errorf("replay = %d %v, want 200 with charge_id %s", second.status, second.body, id)
	}
	if got := second.header.Get(HeaderReplayed); got != "true" {
		t.Errorf("replay %s = %q, want true", HeaderReplayed, got)
	}

	charges := s.Charges()
	if len(charges) != 1 {
		t.Fatalf("Charges() = %+v, want one", charges)
	}
	want := Charge{ID: id, Key: key, OrderID: "ord-1", CustomerID: "cus-1", Amount: 12990, Currency: "EUR", Time: charges[0].Time}
	if charges[0] != want {
		t.Errorf("charge = %+v, want %+v", charges[0], want)
	}
	if got := s.ChargesForOrder("ord-1"); len(got) != 1 || got[0].ID != id {
		t.Errorf("ChargesForOrder(ord-1) = %+v, want the one charge", got)
	}
	if got := s.ChargesForOrder("ord-2"); len(got) != 0 {
		t.Errorf("ChargesForOrder(ord-2) = %+v, want none", got)
	}
	calls := s.Calls()
	if got, want := fmt.Sprint(statuses(calls)), "[201 200]"; got != want {
		t.Fatalf("call statuses = %s, want %s", got, want)
	}
	if calls[0].TraceParent != tp || calls[1].TraceParent != "" {
		t.Errorf("traceparents = %q, %q; want %q, \"\"", calls[0].TraceParent, calls[1].TraceParent, tp)
	}
	if calls[0].Replayed || !calls[1].Replayed {
		t.Errorf("replayed = %v, %v; want false, true", calls[0].Replayed, calls[1].Replayed)
	}
	if c0 := calls[0]; c0.Key != key || c0.OrderID != "ord-1" || c0.CustomerID != "cus-1" || c0.Amount != 12990 || c0.Currency != "EUR" || c0.Time.IsZero() {
		t.Errorf("call = %+v, want the request's fields", c0)
	}
}

func TestSameKeyDifferentBody(t *testing.T) {
	t.Parallel()
	s, base := start(t, Options{})
	c := newHTTPClient(t)
	if r := mustPost(t, c, base, "k1", body("ord-1", "cus-1"), nil); r.status != http.StatusCreated {
		t.Fatalf("first = %d, want 201", r.status)
	}
	changed := body("ord-1", "cus-1")
	changed.Amount++
	r := mustPost(t, c, base, "k1", changed, nil)
	if r.status != http.StatusUnprocessableEntity {
		t.Errorf("same key, other amount = %d %v, want 422", r.status, r.body)
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

func TestDeclineIsRemembered(t *testing.T) {
	t.Parallel()
	s, base := start(t, Options{})
	c := newHTTPClient(t)
	r := mustPost(t, c, base, "k-dec", body("ord-d", "declined-7"), nil)
	if r.status != http.StatusPaymentRequired || r.header.Get(HeaderReplayed) != "" {
		t.Fatalf("first = %d (replayed %q), want 402 not replayed", r.status, r.header.Get(HeaderReplayed))
	}
	r = mustPost(t, c, base, "k-dec", body("ord-d", "declined-7"), nil)
	if r.status != http.StatusPaymentRequired || r.header.Get(HeaderReplayed) != "true" {
		t.Errorf("replay = %d (replayed %q), want 402 replayed", r.status, r.header.Get(HeaderReplayed))
	}
	if n := len(s.Charges()); n != 0 {
		t.Errorf("%d charges for a declined order, want 0", n)
	}
}

func TestDeclineIfOption(t *testing.T) {
	t.Parallel()
	_, base := start(t, Options{DeclineIf: func(b Body) bool { return b.Amount > 1000 }})
	c := newHTTPClient(t)
	big := body("ord-big", "declined-no-matter")
	if r := mustPost(t, c, base, "k-big", big, nil); r.status != http.StatusPaymentRequired {
		t.Errorf("amount %d = %d, want 402", big.Amount, r.status)
	}
	small := Body{OrderID: "ord-small", CustomerID: "declined-x", Amount: 5, Currency: "EUR"}
	if r := mustPost(t, c, base, "k-small", small, nil); r.status != http.StatusCreated {
		t.Errorf("amount %d = %d, want 201 (the option replaces the default rule)", small.Amount, r.status)
	}
}

func TestValidation(t *testing.T) { forBothServers(t, testValidation) }

func testValidation(t *testing.T, start startFunc) {
	valid := `{"order_id":"ord-1","customer_id":"cus-1","amount":100,"currency":"EUR"}`
	tests := []struct {
		name   string
		method string
		path   string
		ctype  string
		key    string
		body   string
		want   int
	}{
		{"bad json", "POST", Path, "application/json", "k", `{"order_id":`, 400},
		{"json array", "POST", Path, "application/json", "k", `[]`, 400},
		{"missing order", "POST", Path, "application/json", "k", `{"customer_id":"c","amount":1,"currency":"EUR"}`, 400},
		{"blank customer", "POST", Path, "application/json", "k", `{"order_id":"o","customer_id":" ","amount":1,"currency":"EUR"}`, 400},
		{"zero amount", "POST", Path, "application/json", "k", `{"order_id":"o","customer_id":"c","amount":0,"currency":"EUR"}`, 400},
		{"negative amount", "POST", Path, "application/json", "k", `{"order_id":"o","customer_id":"c","amount":-5,"currency":"EUR"}`, 400},
		{"string amount", "POST", Path, "application/json", "k", `{"order_id":"o","customer_id":"c","amount":"5","currency":"EUR"}`, 400},
		{"missing currency", "POST", Path, "application/json", "k", `{"order_id":"o","customer_id":"c","amount":5}`, 400},
		{"missing key", "POST", Path, "application/json", "", valid, 400},
		{"long key", "POST", Path, "application/json", strings.Repeat("k", 256), valid, 400},
		{"not json content type", "POST", Path, "text/plain", "k", valid, 400},
		{"too large", "POST", Path, "application/json", "k", `{"order_id":"` + strings.Repeat("o", maxBodyBytes) + `"}`, 413},
		{"PUT", "PUT", Path, "", "k", "", 405},
		{"other path", "POST", "/refunds", "application/json", "k", valid, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, base := start(t, Options{})
			c := newHTTPClient(t)
			req, err := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			if tt.key != "" {
				req.Header.Set(HeaderIdempotencyKey, tt.key)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.want)
			}
			if n := len(s.Charges()); n != 0 {
				t.Errorf("%d charges, want 0", n)
			}
			// A refused request is not remembered: the key is still free.
			if tt.key == "k" {
				if r := mustPost(t, c, base, "k", body("ord-ok", "cus-ok"), nil); r.status != http.StatusCreated {
					t.Errorf("valid request after the refused one = %d, want 201", r.status)
				}
			}
		})
	}
}

func TestInProgressConflict(t *testing.T) { forBothServers(t, testInProgressConflict) }

func testInProgressConflict(t *testing.T, start startFunc) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s, base := start(t, Options{DeclineIf: func(Body) bool {
		once.Do(func() { close(entered) })
		<-release
		return false
	}})
	c := newHTTPClient(t)

	type result struct {
		r   response
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		r, err := post(context.Background(), c, base, "k-slow", body("ord-1", "cus-1"), nil)
		firstDone <- result{r, err}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("first request never started charging")
	}

	second := mustPost(t, c, base, "k-slow", body("ord-1", "cus-1"), nil)
	if second.status != http.StatusConflict || second.body["error"] != "in_progress" || second.header.Get("Retry-After") != "1" {
		t.Errorf("concurrent request = %d %v Retry-After %q, want 409 in_progress Retry-After 1",
			second.status, second.body, second.header.Get("Retry-After"))
	}
	close(release)
	first := <-firstDone
	if first.err != nil || first.r.status != http.StatusCreated {
		t.Fatalf("first request = %d, %v; want 201", first.r.status, first.err)
	}
	third := mustPost(t, c, base, "k-slow", body("ord-1", "cus-1"), nil)
	if third.status != http.StatusOK || third.body["charge_id"] != first.r.body["charge_id"] {
		t.Errorf("after it finished = %d %v, want 200 with %v", third.status, third.body, first.r.body["charge_id"])
	}
	if n := len(s.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

func TestResetAfterCharge(t *testing.T) { forBothServers(t, testResetAfterCharge) }

func testResetAfterCharge(t *testing.T, start startFunc) {
	s, base := start(t, Options{})
	var seen []int
	var mu sync.Mutex
	s.SetFault(func(c Call, n int) Fault {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
		return Fault{ResetAfterCharge: n == 1}
	})
	c := newHTTPClient(t)

	if r, err := post(context.Background(), c, base, "k-reset", body("ord-r", "cus-r"), nil); err == nil {
		t.Fatalf("first request got a reply %d %v, want a connection error", r.status, r.body)
	}
	if n := len(s.Charges()); n != 1 {
		t.Fatalf("after the reset: %d charges, want 1 (the charge happened before the reset)", n)
	}
	r := mustPost(t, c, base, "k-reset", body("ord-r", "cus-r"), nil)
	if r.status != http.StatusOK || r.header.Get(HeaderReplayed) != "true" || r.body["charge_id"] != s.Charges()[0].ID {
		t.Errorf("retry = %d %v (replayed %q), want 200 replay of %s", r.status, r.body, r.header.Get(HeaderReplayed), s.Charges()[0].ID)
	}
	if got := s.ChargesForOrder("ord-r"); len(got) != 1 {
		t.Errorf("ChargesForOrder = %+v, want one", got)
	}
	if got, want := fmt.Sprint(statuses(s.Calls())), "[0 200]"; got != want {
		t.Errorf("call statuses = %s, want %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := fmt.Sprint(seen), "[1 2]"; got != want {
		t.Errorf("fault saw n = %s, want %s", got, want)
	}
}

func TestFaultStatusDoesNotCharge(t *testing.T) { forBothServers(t, testFaultStatusDoesNotCharge) }

func testFaultStatusDoesNotCharge(t *testing.T, start startFunc) {
	s, base := start(t, Options{})
	s.SetFault(func(c Call, n int) Fault {
		if c.OrderID == "ord-flaky" && n == 1 {
			return Fault{Status: http.StatusServiceUnavailable}
		}
		return Fault{}
	})
	c := newHTTPClient(t)
	if r := mustPost(t, c, base, "k-f", body("ord-flaky", "cus-1"), nil); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first = %d, want 503", r.status)
	}
	if n := len(s.Charges()); n != 0 {
		t.Fatalf("%d charges after a 503, want 0", n)
	}
	if r := mustPost(t, c, base, "k-f", body("ord-flaky", "cus-1"), nil); r.status != http.StatusCreated || r.header.Get(HeaderReplayed) != "" {
		t.Errorf("retry = %d (replayed %q), want a fresh 201", r.status, r.header.Get(HeaderReplayed))
	}
	s.SetFault(nil)
	if r := mustPost(t, c, base, "k-g", body("ord-flaky", "cus-1"), nil); r.status != http.StatusCreated {
		t.Errorf("after SetFault(nil) = %d, want 201", r.status)
	}
	if got, want := fmt.Sprint(statuses(s.Calls())), "[503 201 201]"; got != want {
		t.Errorf("call statuses = %s, want %s", got, want)
	}
}

// EchoRequest puts the request's headers, Authorization first, into the
// error message of the injected status.
func TestFaultEchoesRequest(t *testing.T) {
	t.Parallel()
	s, base := start(t, Options{})
	s.SetFault(func(Call, int) Fault { return Fault{Status: http.StatusInternalServerError, EchoRequest: true} })
	r := mustPost(t, newHTTPClient(t), base, "k-echo", body("ord-1", "cus-1"),
		map[string]string{"Authorization": "Basic c3ZjOnB3", "X-Other": "1"})
	msg, _ := r.body["message"].(string)
	if r.status != http.StatusInternalServerError || !strings.HasPrefix(msg, "request headers: Authorization: Basic c3ZjOnB3") ||
		!strings.Contains(msg, "X-Other: 1") {
		t.Errorf("reply %d %v, want 500 echoing the headers, Authorization first", r.status, r.body)
	}
}

func TestClientTimeoutStillCharges(t *testing.T) { forBothServers(t, testClientTimeoutStillCharges) }

func testClientTimeoutStillCharges(t *testing.T, start startFunc) {
	release := make(chan struct{})
	s, base := start(t, Options{DeclineIf: func(Body) bool { <-release; return false }})
	c := newHTTPClient(t)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := post(ctx, c, base, "k-t", body("ord-t", "cus-t"), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	close(release)
	poll.Until(t, "the abandoned request to charge", 5*time.Second, func() bool { return len(s.Charges()) > 0 })
	// The charge and its Call are recorded together under the lock, so the key is final now.
	r := mustPost(t, c, base, "k-t", body("ord-t", "cus-t"), nil)
	if r.status != http.StatusOK || r.body["charge_id"] != s.Charges()[0].ID {
		t.Errorf("retry = %d %v, want 200 replay of %s", r.status, r.body, s.Charges()[0].ID)
	}
}

func TestLatency(t *testing.T) { forBothServers(t, testLatency) }

func testLatency(t *testing.T, start startFunc) {
	s, base := start(t, Options{})
	c := newHTTPClient(t)
	const d = 150 * time.Millisecond
	s.SetLatency(d)
	t0 := time.Now()
	mustPost(t, c, base, "k-l1", body("ord-l", "cus-l"), nil)
	if got := time.Since(t0); got < d {
		t.Errorf("reply after %v, want at least the latency %v", got, d)
	}
	s.SetLatency(0)
	s.SetFault(func(Call, int) Fault { return Fault{Delay: d} })
	t0 = time.Now()
	mustPost(t, c, base, "k-l2", body("ord-l2", "cus-l"), nil)
	if got := time.Since(t0); got < d {
		t.Errorf("reply after %v, want at least the fault delay %v", got, d)
	}
}

func TestCloseEndsWaits(t *testing.T) { forBothServers(t, testCloseEndsWaits) }

func testCloseEndsWaits(t *testing.T, start startFunc) {
	s := New(Options{Latency: time.Hour})
	base, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan struct{})
	s.SetFault(func(Call, int) Fault { close(arrived); return Fault{} })
	c := newHTTPClient(t)
	errc := make(chan error, 1)
	go func() {
		_, err := post(context.Background(), c, base, "k-c", body("ord-c", "cus-c"), nil)
		errc <- err
	}()
	<-arrived
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeTimeout / 2):
		t.Fatal("Close did not end the hour-long latency")
	}
	if err := <-errc; err == nil {
		t.Error("request to a closed stub got a reply, want an error")
	}
	s.Close() // twice is fine
}

func TestConcurrentKeysChargeOnce(t *testing.T) {
	t.Parallel()
	s, base := start(t, Options{})
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	t.Cleanup(c.CloseIdleConnections)
	const orders, perKey = 20, 5
	var wg sync.WaitGroup
	for i := range orders {
		for range perKey {
			wg.Go(func() {
				key := fmt.Sprintf("key-%d", i)
				r, err := post(context.Background(), c, base, key, body(fmt.Sprintf("ord-%d", i), "cus"), nil)
				if err != nil {
					t.Errorf("key %s: %v", key, err)
					return
				}
				switch r.status {
				case http.StatusCreated, http.StatusOK, http.StatusConflict:
				default:
					t.Errorf("key %s: status %d, want 201, 200 or 409", key, r.status)
				}
			})
		}
	}
	wg.Wait()
	if n := len(s.Charges()); n != orders {
		t.Errorf("%d charges, want one per key = %d", n, orders)
	}
	for i := range orders {
		if n := len(s.ChargesForOrder(fmt.Sprintf("ord-%d", i))); n != 1 {
			t.Errorf("ord-%d: %d charges, want 1", i, n)
		}
	}
	if n := len(s.Calls()); n != orders*perKey {
		t.Errorf("%d calls recorded, want %d", n, orders*perKey)
	}
}

func TestNoCallLog(t *testing.T) {
	t.Parallel()
	s, base := start(t, Options{NoCallLog: true})
	c := newHTTPClient(t)
	mustPost(t, c, base, "k-1", body("ord-1", "cus-1"), nil)
	if r := mustPost(t, c, base, "k-1", body("ord-1", "cus-1"), nil); r.status != http.StatusOK {
		t.Errorf("replay = %d, want 200: the key is still remembered", r.status)
	}
	if n := len(s.Calls()); n != 0 {
		t.Errorf("%d calls logged, want none", n)
	}
	if ch := s.Charges(); len(ch) != 1 || ch[0].OrderID != "ord-1" {
		t.Errorf("charges %+v, want the one charge of ord-1", ch)
	}
}

func TestHold(t *testing.T) { forBothServers(t, testHold) }

// testHold: held requests get no answer and charge nothing until release;
// then each runs, the one whose client left meanwhile included, and a
// request after the release is not held.
func testHold(t *testing.T, start startFunc) {
	s, base := start(t, Options{})
	c := newHTTPClient(t)
	release := s.Hold()

	gone, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 2)
	go func() {
		_, err := post(gone, c, base, "k-gone", body("ord-gone", "cus-h"), nil)
		errc <- err
	}()
	replies := make(chan response, 1)
	go func() {
		r, err := post(context.Background(), c, base, "k-stay", body("ord-stay", "cus-h"), nil)
		replies <- r
		errc <- err
	}()
	poll.Until(t, "two requests held", 5*time.Second, func() bool { return s.Held() == 2 })
	if n := len(s.Charges()) + len(s.Calls()); n != 0 {
		t.Fatalf("charges and calls while held = %d, want 0", n)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client that left: err = %v, want context.Canceled", err)
	}
	release()
	release() // twice is fine
	if r := <-replies; r.status != http.StatusCreated {
		t.Errorf("held request after release = %d, want 201", r.status)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "both held requests to charge", 5*time.Second, func() bool { return len(s.Charges()) == 2 })
	if s.Held() != 0 {
		t.Errorf("Held() after release = %d, want 0", s.Held())
	}
	if r := mustPost(t, c, base, "k-after", body("ord-after", "cus-h"), nil); r.status != http.StatusCreated {
		t.Errorf("request after release = %d, want 201 at once", r.status)
	}
}

// TestCloseEndsHold: closing the stub ends a hold's wait without charging.
func TestCloseEndsHold(t *testing.T) {
	t.Parallel()
	s := New(Options{})
	base, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	s.Hold()
	c := newHTTPClient(t)
	errc := make(chan error, 1)
	go func() {
		_, err := post(context.Background(), c, base, "k-c", body("ord-c", "cus-c"), nil)
		errc <- err
	}()
	poll.Until(t, "the request held", 5*time.Second, func() bool { return s.Held() == 1 })
	s.Close()
	if err := <-errc; err == nil {
		t.Error("held request to a closed stub got a reply, want an error")
	}
	if n := len(s.Charges()); n != 0 {
		t.Errorf("charges = %d, want 0", n)
	}
}
