package httpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// chargeReq returns a charge request under a fresh UUIDv7 key.
func chargeReq(t *testing.T, orderID, customerID string) order.ChargeRequest {
	t.Helper()
	key, err := uuid.NewV7()
	if err != nil {
		t.Fatalf("new key: %v", err)
	}
	return order.ChargeRequest{IdempotencyKey: key, OrderID: orderID, CustomerID: customerID,
		Amount: order.Money{Amount: 12990, Currency: "EUR"}}
}

// serve runs h on a loopback httptest server for the test.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections() // ends handlers waiting for the client to leave
		srv.Close()
	})
	return srv.URL
}

// hang returns a handler that never answers: it reads the request, so that
// net/http notices when the client hangs up, and returns when the client has
// gone (serve's cleanup closes every connection). entered, when not nil,
// receives one value per request.
func hang(entered chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if entered != nil {
			entered <- struct{}{}
		}
		<-r.Context().Done()
	}
}

// startStub runs a gateway stub for the test.
func startStub(t *testing.T, opts gatewaystub.Options) (*gatewaystub.Stub, string) {
	t.Helper()
	s := gatewaystub.New(opts)
	base := s.StartTest(t)
	return s, base
}

// newClient returns a Client with its own metrics, closed at the end of the test.
func newClient(t *testing.T, base string, timeout time.Duration, opts ...Option) (*Client, *metrics.Metrics) {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry(), false)
	opts = append([]Option{WithMetrics(m.Gateway())}, opts...)
	c, err := NewClient(base, timeout, opts...)
	if err != nil {
		t.Fatalf("NewClient(%q): %v", base, err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c, m
}

// durationCount returns how many latencies the histogram observed.
func durationCount(t *testing.T, m *metrics.Metrics) uint64 {
	t.Helper()
	var pb dto.Metric
	if err := m.PaymentDuration.Write(&pb); err != nil {
		t.Fatalf("read histogram: %v", err)
	}
	return pb.GetHistogram().GetSampleCount()
}

func requestsWithCode(m *metrics.Metrics, code string) int {
	return int(testutil.ToFloat64(m.PaymentRequests.WithLabelValues(code)))
}

// fastBreaker trips after min calls and probes again after 50 ms.
func fastBreaker(min uint32) Option {
	return WithBreaker(BreakerSettings{MinRequests: min, FailureRatio: 0.9, Window: 10 * time.Second, CoolDown: 50 * time.Millisecond})
}

// TestReplyMapping checks every row of docs/interface.md §6, and a few replies the
// contract does not list, against the result, the class and the metrics.
func TestReplyMapping(t *testing.T) {
	t.Parallel()
	inAnHour := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		want       order.ChargeResult // when wantClass is -1
		wantClass  order.Class        // -1: no error
		retryAfter time.Duration      // for transient errors; -1: "about an hour"
	}{
		{"201 succeeded", 201, nil, `{"charge_id":"ch_1","status":"succeeded"}`,
			order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch_1"}, -1, 0},
		{"200 succeeded", 200, nil, `{"charge_id":"ch_2","status":"succeeded","amount":12990}`,
			order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch_2"}, -1, 0},
		{"200 replayed", 200, map[string]string{"Idempotent-Replayed": "true"}, `{"charge_id":"ch_3","status":"succeeded"}`,
			order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch_3", Replayed: true}, -1, 0},
		{"200 other status", 200, nil, `{"charge_id":"ch_4","status":"pending"}`, order.ChargeResult{}, order.ClassTransient, 0},
		{"200 failed status", 200, nil, `{"charge_id":"ch_4","status":"failed"}`, order.ChargeResult{}, order.ClassTransient, 0},
		{"200 malformed body", 200, nil, `{"charge_id":`, order.ChargeResult{}, order.ClassTransient, 0},
		{"200 HTML body", 200, nil, `<html>ok</html>`, order.ChargeResult{}, order.ClassTransient, 0},
		{"201 empty body", 201, nil, ``, order.ChargeResult{}, order.ClassTransient, 0},
		{"200 null body", 200, nil, `null`, order.ChargeResult{}, order.ClassTransient, 0},
		// Past MaxReplyBytes after it said "succeeded": a charge all the same.
		{"200 oversized body", 200, nil, `{"charge_id":"ch_5","status":"succeeded"}` + strings.Repeat(" ", MaxReplyBytes),
			order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch_5"}, -1, 0},
		{"200 oversized body before its status", 200, nil, `{"pad":"` + strings.Repeat(" ", MaxReplyBytes) + `","charge_id":"ch_5","status":"succeeded"}`,
			order.ChargeResult{}, order.ClassTransient, 0},
		{"202 accepted", 202, nil, `{"charge_id":"ch_6","status":"succeeded"}`, order.ChargeResult{}, order.ClassTransient, 0},
		{"204 no content", 204, nil, ``, order.ChargeResult{}, order.ClassTransient, 0},
		{"409 retry-after seconds", 409, map[string]string{"Retry-After": "3"}, `{}`, order.ChargeResult{}, order.ClassTransient, 3 * time.Second},
		{"409 retry-after date", 409, map[string]string{"Retry-After": inAnHour}, ``, order.ChargeResult{}, order.ClassTransient, -1},
		{"409 in_progress body", 409, nil, `{"error":"in_progress"}`, order.ChargeResult{}, order.ClassTransient, 0},
		{"409 already processed", 409, nil, `{"error":"idempotency_key_used"}`,
			order.ChargeResult{Status: order.ChargeSucceeded, Replayed: true}, -1, 0},
		{"409 no body", 409, nil, ``, order.ChargeResult{Status: order.ChargeSucceeded, Replayed: true}, -1, 0},
		{"409 with charge id", 409, nil, `{"charge_id":"ch_7"}`,
			order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch_7", Replayed: true}, -1, 0},
		{"402 declined", 402, nil, `{"error":"card_declined"}`, order.ChargeResult{Status: order.ChargeDeclined}, -1, 0},
		{"402 replayed", 402, map[string]string{"Idempotent-Replayed": "true"}, ``,
			order.ChargeResult{Status: order.ChargeDeclined, Replayed: true}, -1, 0},
		{"422 key reused", 422, nil, `{"error":"idempotency_key_reused"}`, order.ChargeResult{}, order.ClassPermanent, 0},
		{"400", 400, nil, `{"error":"invalid_request","message":"amount\nmust be > 0"}`, order.ChargeResult{}, order.ClassPermanent, 0},
		{"401 credentials refused", 401, nil, `{"error":"invalid_api_key"}`, order.ChargeResult{}, order.ClassOutage, 0},
		{"403 credentials refused", 403, nil, ``, order.ChargeResult{}, order.ClassOutage, 0},
		{"404", 404, nil, `not found`, order.ChargeResult{}, order.ClassPermanent, 0},
		{"405", 405, nil, ``, order.ChargeResult{}, order.ClassPermanent, 0},
		{"413", 413, nil, ``, order.ChargeResult{}, order.ClassPermanent, 0},
		{"429", 429, map[string]string{"Retry-After": "7"}, ``, order.ChargeResult{}, order.ClassTransient, 7 * time.Second},
		{"500", 500, nil, `{"error":"boom"}`, order.ChargeResult{}, order.ClassTransient, 0},
		{"502", 502, nil, `<html>bad gateway</html>`, order.ChargeResult{}, order.ClassTransient, 0},
		{"503 retry-after", 503, map[string]string{"Retry-After": "2"}, ``, order.ChargeResult{}, order.ClassTransient, 2 * time.Second},
		{"504", 504, nil, ``, order.ChargeResult{}, order.ClassTransient, 0},
		{"302 not followed", 302, map[string]string{"Location": "/elsewhere"}, ``, order.ChargeResult{}, order.ClassTransient, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls, elsewhere atomic.Int32
			base := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/charges" {
					elsewhere.Add(1)
					w.WriteHeader(http.StatusOK)
					_, _ = io.WriteString(w, `{"charge_id":"ch_wrong","status":"succeeded"}`)
					return
				}
				calls.Add(1)
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			c, m := newClient(t, base, 5*time.Second)
			got, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))

			if tt.wantClass == -1 {
				if err != nil {
					t.Fatalf("Charge() error = %v, want none", err)
				}
				// The reply's status, for the invoice's history of answers.
				tt.want.StatusCode = tt.status
				if got != tt.want {
					t.Errorf("Charge() = %+v, want %+v", got, tt.want)
				}
			} else {
				if err == nil {
					t.Fatalf("Charge() = %+v, nil; want a %v error", got, tt.wantClass)
				}
				// The invoice's history records the status and, only when
				// it is a short token, the gateway's error code.
				if a := order.AnswerOf(got, err); a != strconv.Itoa(tt.status) && !strings.HasPrefix(a, strconv.Itoa(tt.status)+" ") ||
					strings.ContainsAny(a, "\n<>:") {
					t.Errorf("AnswerOf(Charge()) = %q, want the status %d and at most an error-code token", a, tt.status)
				}
				if cl := order.Classify(err); cl != tt.wantClass {
					t.Errorf("Classify(%v) = %v, want %v", err, cl, tt.wantClass)
				}
				if got != (order.ChargeResult{}) {
					t.Errorf("Charge() result = %+v with an error, want the zero result", got)
				}
				if strings.ContainsAny(err.Error(), "\r\n") {
					t.Errorf("error text %q is not one line", err.Error())
				}
				if tt.wantClass == order.ClassTransient {
					te, ok := errors.AsType[*order.TransientError](err)
					if !ok {
						t.Fatalf("error %v is not a *order.TransientError", err)
					}
					switch {
					case tt.retryAfter == -1:
						if te.RetryAfter < 58*time.Minute || te.RetryAfter > time.Hour {
							t.Errorf("RetryAfter = %v, want about an hour", te.RetryAfter)
						}
					case te.RetryAfter != tt.retryAfter:
						t.Errorf("RetryAfter = %v, want %v", te.RetryAfter, tt.retryAfter)
					}
				}
				if tt.wantClass == order.ClassPermanent {
					if _, ok := errors.AsType[*order.PermanentError](err); !ok {
						t.Errorf("error %v is not a *order.PermanentError", err)
					}
				}
				if tt.wantClass == order.ClassOutage {
					if oe, ok := errors.AsType[*order.OutageError](err); !ok || oe.Dependency != order.DependencyGateway {
						t.Errorf("error %v is not a gateway *order.OutageError", err)
					}
				}
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("gateway called %d times, want 1", n)
			}
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("a redirect was followed %d times, want never", n)
			}
			// The label is the status, or "other" for one §6 does not name
			// (TestCodeLabels).
			if n := requestsWithCode(m, codeLabel(tt.status)); n != 1 {
				t.Errorf("requests{code=%s} = %d, want 1", codeLabel(tt.status), n)
			}
			if n := durationCount(t, m); n != 1 {
				t.Errorf("duration observations = %d, want 1", n)
			}
		})
	}
}

func TestRequestOnTheWire(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, ctype, key, traceparent, user, pass string
		basicAuth                                         bool
		body                                              map[string]any
	}
	got := make(chan seen, 1)
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, ctype: r.Header.Get("Content-Type"),
			key: r.Header.Get("Idempotency-Key"), traceparent: r.Header.Get("traceparent")}
		s.user, s.pass, s.basicAuth = r.BasicAuth()
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		if err := dec.Decode(&s.body); err != nil {
			t.Errorf("request body: %v", err)
		}
		got <- s
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge_id":"ch_1","status":"succeeded"}`)
	})
	withUser := strings.Replace(base, "http://", "http://svc:s3cret@", 1) + "/v1/"
	c, _ := newClient(t, withUser, 5*time.Second)

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := chargeReq(t, "ord-77", "cus-9")
	if _, err := c.Charge(remoteParent(t, parent), req); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	s := <-got
	if s.method != "POST" || s.path != "/v1/charges" {
		t.Errorf("request = %s %s, want POST /v1/charges", s.method, s.path)
	}
	if s.ctype != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", s.ctype)
	}
	if want := req.IdempotencyKey.String(); s.key != want || s.key != strings.ToLower(s.key) || len(s.key) != 36 {
		t.Errorf("Idempotency-Key = %q, want the canonical %q", s.key, want)
	}
	wantBody := map[string]any{"order_id": "ord-77", "customer_id": "cus-9", "amount": json.Number("12990"), "currency": "EUR"}
	if fmt.Sprint(s.body) != fmt.Sprint(wantBody) {
		t.Errorf("body = %v, want %v", s.body, wantBody)
	}
	// Without WithTracerProvider no span is recorded: the record's
	// traceparent goes on unchanged (WithTracerProvider's test checks the
	// client span's).
	if s.traceparent != parent {
		t.Errorf("traceparent = %q, want %q passed on", s.traceparent, parent)
	}
	if !s.basicAuth || s.user != "svc" || s.pass != "s3cret" {
		t.Errorf("basic auth = %q, %q, %v; want the base URL's userinfo", s.user, s.pass, s.basicAuth)
	}

	// No trace in the context: no header.
	if _, err := c.Charge(context.Background(), chargeReq(t, "ord-78", "cus-9")); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if s := <-got; s.traceparent != "" {
		t.Errorf("traceparent = %q without a trace in the context, want none", s.traceparent)
	}
}

func TestAgainstStub(t *testing.T) {
	t.Parallel()
	stub, base := startStub(t, gatewaystub.Options{})
	c, m := newClient(t, base, 5*time.Second)
	ctx := context.Background()
	req := chargeReq(t, "ord-1", "cus-1")

	first, err := c.Charge(ctx, req)
	if err != nil || first.Status != order.ChargeSucceeded || first.Replayed {
		t.Fatalf("first Charge = %+v, %v; want a fresh success", first, err)
	}
	charges := stub.Charges()
	if len(charges) != 1 || charges[0].ID != first.ChargeID || charges[0].Key != req.IdempotencyKey.String() {
		t.Fatalf("stub charges = %+v, want one with id %s and key %s", charges, first.ChargeID, req.IdempotencyKey)
	}
	again, err := c.Charge(ctx, req)
	want := order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: first.ChargeID, Replayed: true, StatusCode: 200}
	if err != nil || again != want {
		t.Errorf("second Charge = %+v, %v; want %+v", again, err, want)
	}

	changed := req
	changed.Amount.Amount++
	if _, err := c.Charge(ctx, changed); order.Classify(err) != order.ClassPermanent {
		t.Errorf("same key, other amount: err = %v, want permanent", err)
	}

	declined, err := c.Charge(ctx, chargeReq(t, "ord-2", "declined-1"))
	if err != nil || declined.Status != order.ChargeDeclined {
		t.Errorf("declined customer: %+v, %v; want ChargeDeclined", declined, err)
	}
	if n := len(stub.Charges()); n != 1 {
		t.Errorf("stub charges = %d, want 1", n)
	}
	for code, want := range map[string]int{"201": 1, "200": 1, "422": 1, "402": 1} {
		if n := requestsWithCode(m, code); n != want {
			t.Errorf("requests{code=%s} = %d, want %d", code, n, want)
		}
	}
	if n := durationCount(t, m); n != 4 {
		t.Errorf("duration observations = %d, want 4", n)
	}
}

func TestTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	base := serve(t, hang(nil))
	c, m := newClient(t, base, 100*time.Millisecond)
	_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
	if _, ok := errors.AsType[*order.TransientError](err); !ok || order.Classify(err) != order.ClassTransient {
		t.Fatalf("err = %v (class %v), want a *order.TransientError", err, order.Classify(err))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
	}
	if n := requestsWithCode(m, "error"); n != 1 {
		t.Errorf(`requests{code="error"} = %d, want 1`, n)
	}
	if n := durationCount(t, m); n != 1 {
		t.Errorf("duration observations = %d, want 1", n)
	}
}

func TestSlowStubTimesOutThenReplays(t *testing.T) {
	t.Parallel()
	stub, base := startStub(t, gatewaystub.Options{})
	stub.SetFault(func(_ gatewaystub.Call, n int) gatewaystub.Fault {
		if n == 1 {
			return gatewaystub.Fault{Delay: 300 * time.Millisecond}
		}
		return gatewaystub.Fault{}
	})
	// A 50 ms timeout meets more timeouts on a loaded machine: this test is
	// about the replay, not about when timeouts make an outage.
	c, _ := newClient(t, base, 50*time.Millisecond, WithBreaker(BreakerSettings{ConsecutiveNoReply: 1000, MinRequests: 1000}))
	req := chargeReq(t, "ord-slow", "cus-1")
	if _, err := c.Charge(context.Background(), req); order.Classify(err) != order.ClassTransient {
		t.Fatalf("slow reply: err = %v, want transient", err)
	}
	// The stub finishes the abandoned charge; poll until it has.
	var res order.ChargeResult
	poll.Until(t, "the retry to succeed once the first request finishes", 5*time.Second, func() bool {
		var err error
		res, err = c.Charge(context.Background(), req)
		if err != nil && order.Classify(err) != order.ClassTransient {
			t.Fatalf("retry: err = %v, want transient until the first request finishes, then success", err)
		}
		return err == nil
	})
	charges := stub.Charges()
	if len(charges) != 1 || res.ChargeID != charges[0].ID || !res.Replayed {
		t.Errorf("retry = %+v, charges %+v; want a replay of the one charge", res, charges)
	}
}

func TestCallerCancelIsNotTransient(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 10)
	base := serve(t, hang(entered))
	c, _ := newClient(t, base, 5*time.Second, fastBreaker(1))
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-entered; cancel() }()
		_, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1"))
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want it to wrap context.Canceled", err)
		}
		if _, ok := errors.AsType[*order.TransientError](err); ok {
			t.Errorf("err = %v is a TransientError, want a plain cancellation", err)
		}
		if cl := order.Classify(err); cl != order.ClassCanceled {
			t.Errorf("Classify = %v, want canceled", cl)
		}
	}
	if !c.Healthy() {
		t.Error("breaker open after canceled calls, want them not counted")
	}
}

func TestCallerDeadlineIsTransientButNotCounted(t *testing.T) {
	t.Parallel()
	base := serve(t, hang(nil))
	c, _ := newClient(t, base, 5*time.Second, fastBreaker(1))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1"))
	if cl := order.Classify(err); cl != order.ClassTransient {
		t.Errorf("err = %v (class %v), want transient", err, cl)
	}
	if !c.Healthy() {
		t.Error("breaker open after the caller's own deadline, want it not counted")
	}
}

func TestConnectionRefusedRedactsUserinfo(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	c, m := newClient(t, "http://alice:s3cret@"+addr, 2*time.Second)
	_, err = c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
	if cl := order.Classify(err); cl != order.ClassOutage { // refused every attempt: TestConsecutiveNoReplyIsOutage
		t.Fatalf("err = %v (class %v), want outage", err, cl)
	}
	if _, ok := errors.AsType[*net.OpError](err); !ok {
		t.Errorf("err = %v, want it to wrap the *net.OpError", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "s3cret") || strings.Contains(msg, "alice") || !strings.Contains(msg, addr) {
		t.Errorf("error text %q: want the address and no userinfo", msg)
	}
	if n := requestsWithCode(m, "error"); n != DefaultConsecutiveNoReply {
		t.Errorf(`requests{code="error"} = %d, want %d`, n, DefaultConsecutiveNoReply)
	}
}

func TestResetAfterChargeThenRetry(t *testing.T) {
	t.Parallel()
	stub, base := startStub(t, gatewaystub.Options{})
	stub.SetFault(func(_ gatewaystub.Call, n int) gatewaystub.Fault {
		return gatewaystub.Fault{ResetAfterCharge: n == 1}
	})
	c, m := newClient(t, base, 5*time.Second)
	req := chargeReq(t, "ord-reset", "cus-1")
	_, err := c.Charge(context.Background(), req)
	if cl := order.Classify(err); cl != order.ClassTransient {
		t.Fatalf("reset connection: err = %v (class %v), want transient", err, cl)
	}
	res, err := c.Charge(context.Background(), req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	charges := stub.ChargesForOrder("ord-reset")
	if len(charges) != 1 {
		t.Fatalf("charges = %+v, want exactly one", charges)
	}
	want := order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: charges[0].ID, Replayed: true, StatusCode: 200}
	if res != want {
		t.Errorf("retry = %+v, want %+v", res, want)
	}
	if n := requestsWithCode(m, "error"); n != 1 {
		t.Errorf(`requests{code="error"} = %d, want 1`, n)
	}
}

// waitHealthy polls until the breaker lets calls through again.
func waitHealthy(t *testing.T, c *Client) {
	t.Helper()
	poll.Until(t, "the breaker half-open after the cool-down", 5*time.Second, c.Healthy)
}

func TestBreakerTripsAndRecovers(t *testing.T) {
	t.Parallel()
	stub, base := startStub(t, gatewaystub.Options{})
	var down atomic.Bool
	down.Store(true)
	stub.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
		if down.Load() {
			return gatewaystub.Fault{Status: http.StatusServiceUnavailable}
		}
		return gatewaystub.Fault{}
	})
	c, m := newClient(t, base, 5*time.Second, WithBreaker(BreakerSettings{MinRequests: 5, CoolDown: 100 * time.Millisecond}))
	ctx := context.Background()

	// The fifth failure opens the breaker: its own 503 is the outage.
	for i := range 5 {
		want := order.ClassTransient
		if i == 4 {
			want = order.ClassOutage
		}
		_, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1"))
		if order.Classify(err) != want {
			t.Fatalf("call %d: err = %v, want %v", i+1, err, want)
		}
		if re, ok := errors.AsType[*order.GatewayReplyError](err); !ok || re.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("call %d: err = %v, want it to carry the 503", i+1, err)
		}
	}
	if c.Healthy() {
		t.Fatal("Healthy() = true after 5 of 5 calls failed, want false")
	}
	for range 3 {
		_, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1"))
		if cl := order.Classify(err); cl != order.ClassOutage {
			t.Fatalf("while open: err = %v (class %v), want outage", err, cl)
		}
		oe, ok := errors.AsType[*order.OutageError](err)
		if !ok || oe.Dependency != "gateway" || !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("while open: err = %#v, want OutageError{gateway} wrapping ErrCircuitOpen", err)
		}
	}
	if n := len(stub.Calls()); n != 5 {
		t.Errorf("stub saw %d calls, want 5: none while the breaker is open", n)
	}
	if n := requestsWithCode(m, "503"); n != 5 {
		t.Errorf("requests{code=503} = %d, want 5", n)
	}

	// Still down at the first probe: open again at once, and the probe's
	// event is held like the others.
	waitHealthy(t, c)
	if _, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1")); order.Classify(err) != order.ClassOutage || errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("failed probe: err = %v, want the probe's 503 as an outage", err)
	}
	if c.Healthy() {
		t.Error("Healthy() = true after a failed probe, want the breaker open again")
	}

	// Healthy again: the next probe closes the breaker.
	down.Store(false)
	waitHealthy(t, c)
	res, err := c.Charge(ctx, chargeReq(t, "ord-2", "cus-2"))
	if err != nil || res.Status != order.ChargeSucceeded {
		t.Fatalf("probe after recovery = %+v, %v; want success", res, err)
	}
	for i := range 3 {
		if _, err := c.Charge(ctx, chargeReq(t, fmt.Sprintf("ord-%d", i+3), "cus-3")); err != nil {
			t.Errorf("after recovery: %v", err)
		}
	}
	if n := len(stub.Calls()); n != 10 {
		t.Errorf("stub saw %d calls, want 10", n)
	}
}

func TestBreakerIgnoresNonTransientReplies(t *testing.T) {
	t.Parallel()
	// Every reply the same: a gateway that says only this is still a working
	// gateway. A 200 with no body is a transient error of the event, yet not
	// a sign of an outage.
	for _, code := range []int{400, 404, 402, 409, 422, 200} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			base := serve(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
			c, _ := newClient(t, base, 5*time.Second, fastBreaker(5))
			for n := range 20 {
				_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
				if order.Classify(err) == order.ClassOutage {
					t.Fatalf("call %d: outage from %d replies, want the breaker to stay closed", n+1, code)
				}
			}
			if !c.Healthy() {
				t.Error("Healthy() = false, want true")
			}
		})
	}
}

func TestBreakerNeedsNearlyAllFailing(t *testing.T) {
	t.Parallel()
	var i atomic.Int32
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if i.Add(1)%5 == 0 { // one call in five succeeds: 80% fail, under 90%
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"charge_id":"ch_1","status":"succeeded"}`)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c, _ := newClient(t, base, 5*time.Second, fastBreaker(10))
	for n := range 40 {
		if _, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1")); order.Classify(err) == order.ClassOutage {
			t.Fatalf("call %d: outage at an 80%% failure rate, want the breaker closed below 90%%", n+1)
		}
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, wantEndpoint, wantRedacted string
		timeout                          time.Duration
		wantErr                          bool
	}{
		{"http://gw.local", "http://gw.local/charges", "http://gw.local/charges", time.Second, false},
		{"https://gw.local/", "https://gw.local/charges", "https://gw.local/charges", time.Second, false},
		{"https://gw.local/api/v1", "https://gw.local/api/v1/charges", "https://gw.local/api/v1/charges", time.Second, false},
		{"https://u:p%40ss@gw.local:8443/", "https://u:p%40ss@gw.local:8443/charges", "https://gw.local:8443/charges", time.Second, false},
		{"http://gw.local", "", "", 0, true},
		{"", "", "", time.Second, true},
		{"gw.local:8080", "", "", time.Second, true},
		{"ftp://gw.local", "", "", time.Second, true},
		{"http://", "", "", time.Second, true},
		{"http://gw.local/?x=1", "", "", time.Second, true},
		{"http://user:hunter2@gw.local:port/", "", "", time.Second, true},
		{"http://user:hunter2@gw local/", "", "", time.Second, true},
	}
	for _, tt := range tests {
		c, err := NewClient(tt.base, tt.timeout)
		if tt.wantErr {
			if err == nil {
				t.Errorf("NewClient(%q, %v) = nil error, want one", tt.base, tt.timeout)
			} else if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("NewClient(%q) error %q repeats the password", tt.base, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewClient(%q, %v): %v", tt.base, tt.timeout, err)
			continue
		}
		if c.endpoint != tt.wantEndpoint || c.redacted != tt.wantRedacted {
			t.Errorf("NewClient(%q): endpoint %q redacted %q, want %q and %q", tt.base, c.endpoint, c.redacted, tt.wantEndpoint, tt.wantRedacted)
		}
	}
}

func TestWithHTTPClientIsNotModified(t *testing.T) {
	t.Parallel()
	var sent atomic.Int32
	hc := &http.Client{Timeout: 3 * time.Second, Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: http.StatusFound, Header: http.Header{"Location": {"/elsewhere"}}, Request: r}, nil
	})}
	c, err := NewClient("http://gw.local", time.Second, WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	if hc.CheckRedirect != nil || hc.Timeout != 3*time.Second {
		t.Error("NewClient changed the caller's http.Client")
	}
	// The transport's reply, a redirect with no body, is the reply: it is
	// not followed, and its missing body reads as empty.
	if _, err := c.Charge(t.Context(), chargeReq(t, "ord-1", "cus-1")); err == nil {
		t.Error("Charge() = nil error for a 302")
	}
	if n := sent.Load(); n != 1 {
		t.Errorf("the transport carried %d requests, want 1", n)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"5", 5 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"-1", 0},
		{"1.5", 0},
		{"soon", 0},
		{"Wed, 02 Dec 2026 10:00:30 GMT", 30 * time.Second},
		{"Wednesday, 02-Dec-26 10:01:00 GMT", time.Minute},
		{"Wed Dec  2 10:00:10 2026", 10 * time.Second},
		{"Wed, 02 Dec 2026 09:00:00 GMT", 0},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.in, now); got != tt.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	if got, want := oneLineMax("a\nb\r\tc\u2028d", maxErrText), "a b  c d"; got != want {
		t.Errorf("oneLineMax = %q, want %q", got, want)
	}
	long := strings.Repeat("é", maxErrText)
	got := oneLineMax(long, maxErrText)
	if len(got) > maxErrText+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Errorf("oneLineMax(long) = %d bytes %q…, want at most %d bytes ending in …", len(got), got[:10], maxErrText)
	}
	if strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("oneLineMax cut a rune in half: %q", got)
	}
}

// TestIdleConnsKeepEveryConnection: two waves of n concurrent charges; with
// WithIdleConns(n) the second wave reuses the first wave's n connections.
// net/http's defaults (2 idle per host, 100 in all) would close most of them
// and open new ones: a TCP handshake per charge under load.
func TestIdleConnsKeepEveryConnection(t *testing.T) {
	const n = 150 // above net/http's MaxIdleConns of 100
	var (
		opened  atomic.Int32
		arrived atomic.Int32
		all     = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// Hold every request of the first wave until all n are in, so that
		// the wave really needs n connections.
		if arrived.Add(1) == n {
			close(all)
		}
		<-all
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge_id":"ch_1","status":"succeeded"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, _ := newClient(t, srv.URL, 10*time.Second, WithIdleConns(n))

	wave := func() {
		t.Helper()
		errs := make(chan error, n)
		for i := range n {
			go func() {
				_, err := c.Charge(context.Background(), chargeReq(t, fmt.Sprintf("ord-%d", i), "cus"))
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("Charge() error = %v", err)
			}
		}
	}
	wave()
	first := opened.Load()
	if first != n {
		t.Fatalf("first wave opened %d connections, want %d", first, n)
	}
	wave()
	if got := opened.Load() - first; got != 0 {
		t.Errorf("second wave opened %d new connections, want 0 (all %d kept idle)", got, n)
	}
}

// TestCredentialsRefusedIsOutage: a gateway refusing the service itself
// (an expired API key) fails every event alike; each such call is an outage
// of the gateway, at once and at any rate, and the next accepted call is
// an ordinary one.
func TestCredentialsRefusedIsOutage(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	refuse.Store(true)
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge_id":"ch_1","status":"succeeded"}`)
	})
	c, _ := newClient(t, base, 5*time.Second, fastBreaker(20))
	_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
	oe, ok := errors.AsType[*order.OutageError](err)
	if !ok || oe.Dependency != order.DependencyGateway {
		t.Fatalf("first 401: err = %v, want a gateway *order.OutageError", err)
	}
	if re, ok := errors.AsType[*order.GatewayReplyError](err); !ok || re.StatusCode != http.StatusUnauthorized {
		t.Errorf("first 401: err = %v, want it to carry the 401", err)
	}
	// The next call after the cool-down probes; once the key is accepted
	// again it is an ordinary charge (TestEveryOutageProbesWithOneCall).
	refuse.Store(false)
	waitHealthy(t, c)
	if res, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1")); err != nil || res.Status != order.ChargeSucceeded {
		t.Fatalf("after the key is accepted again: %+v, %v; want a charge", res, err)
	}
}

// TestConsecutiveNoReplyIsOutage: the last few calls all failing to connect
// or timing out make an outage whatever the traffic rate (the breaker's
// ratio needs MinRequests calls in its window, which a slow stream never
// reaches); any reply ends the streak.
func TestConsecutiveNoReplyIsOutage(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		// A refused connection carried nothing: the charge itself tries
		// again at once, so the first event of a slow stream already meets
		// the streak, and no event goes to a retry tier.
		c, m := newClient(t, "http://"+addr, 2*time.Second, WithBreaker(BreakerSettings{ConsecutiveNoReply: 3}))
		for n := 1; n <= 2; n++ {
			_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			if cl := order.Classify(err); cl != order.ClassOutage || !order.ChargeEnded(err) {
				t.Fatalf("charge %d: %v (class %v), want outage, nothing sent", n, err, cl)
			}
		}
		if n := requestsWithCode(m, "error"); n != 3 {
			t.Errorf(`requests{code="error"} = %d, want 3 attempts of the first charge and none of the second (the breaker open)`, n)
		}
	})
	t.Run("timeouts, then a reply", func(t *testing.T) {
		t.Parallel()
		var answer atomic.Int32 // 0: hang
		base := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if code := answer.Load(); code != 0 {
				w.WriteHeader(int(code))
				_, _ = io.WriteString(w, `{"charge_id":"ch_1","status":"succeeded"}`)
				return
			}
			hang(nil)(w, r)
		})
		c, _ := newClient(t, base, 100*time.Millisecond, WithBreaker(BreakerSettings{ConsecutiveNoReply: 3}))
		charge := func() error {
			_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			return err
		}
		// Two timeouts, a reply (though not a good one), two timeouts: never
		// three in a row, never an outage.
		for n, code := range []int32{0, 0, http.StatusServiceUnavailable, 0, 0} {
			answer.Store(code)
			if err := charge(); order.Classify(err) != order.ClassTransient {
				t.Fatalf("call %d (answer %d): %v, want transient", n+1, code, err)
			}
		}
		// The third timeout in a row is the outage.
		if err := charge(); order.Classify(err) != order.ClassOutage {
			t.Fatalf("third timeout in a row: %v, want outage", err)
		}
		if c.Healthy() {
			t.Error("breaker closed after three timeouts in a row")
		}
	})
}

// A gateway that trips the breaker with 503s asking for Retry-After keeps
// asking while the breaker is open: the OutageError carries what is left of
// the longest Retry-After, so the consumer holds its events at least that
// long (order.RetryPolicy.Decide). Without a Retry-After it carries none.
func TestBreakerOutageCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, header string
		want         time.Duration // upper bound; zero: none
	}{
		{"with Retry-After", "30", 30 * time.Second},
		{"without Retry-After", "", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := serve(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			// A cool-down longer than the test: the breaker stays open.
			c, _ := newClient(t, base, 5*time.Second, WithBreaker(BreakerSettings{MinRequests: 3, CoolDown: time.Hour}))
			ctx := context.Background()
			for i := range 3 {
				_, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1"))
				te, ok := errors.AsType[*order.TransientError](err)
				if !ok || te.RetryAfter != tt.want {
					t.Fatalf("call %d: err = %v, want a TransientError with RetryAfter %v", i+1, err, tt.want)
				}
			}
			_, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1"))
			oe, ok := errors.AsType[*order.OutageError](err)
			if !ok || !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("breaker open: err = %v, want an OutageError wrapping ErrCircuitOpen", err)
			}
			if tt.want == 0 && oe.RetryAfter != 0 {
				t.Errorf("RetryAfter = %v, want 0: the gateway asked for none", oe.RetryAfter)
			}
			if tt.want > 0 && (oe.RetryAfter <= 0 || oe.RetryAfter > tt.want) {
				t.Errorf("RetryAfter = %v, want what is left of %v", oe.RetryAfter, tt.want)
			}
		})
	}
}

// 401 and 403 refuse the service itself: an outage, which carries the
// gateway's Retry-After when it sends one.
func TestCredentialsRefusedCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusForbidden)
	})
	c, _ := newClient(t, base, 5*time.Second)
	_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
	if oe, ok := errors.AsType[*order.OutageError](err); !ok || oe.RetryAfter != 2*time.Minute {
		t.Fatalf("403 with Retry-After 120: err = %#v, want an OutageError with RetryAfter 2m", err)
	}
}
