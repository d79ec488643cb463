package httpgateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// A gateway whose reply headers are larger than any gateway's (a few KiB)
// is a broken reply: a transient error of the event, counted against the
// gateway, and not read into memory beyond MaxReplyHeaderBytes.
func TestOversizedReplyHeadersAreTheGatewaysFault(t *testing.T) {
	t.Parallel()
	base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		for i := range 9 {
			w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("a", 1<<20))
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charge_id":"ch_1","status":"succeeded"}`))
	})
	c, m := newClient(t, base, 5*time.Second, fastBreaker(4))
	for i := range 4 {
		res, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
		if err == nil {
			t.Fatalf("call %d: Charge() = %+v with 9 MiB of reply headers, want a transient error", i+1, res)
		}
		// Not a "no reply": the streak of those makes an outage after 3
		// calls, whatever the rate, and this gateway does answer. The
		// fourth of four opens the breaker (the ratio): that one is the
		// outage.
		want := order.ClassTransient
		if i == 3 {
			want = order.ClassOutage
		}
		if cl := order.Classify(err); cl != want {
			t.Fatalf("call %d: err = %v (class %v), want %v", i+1, err, cl, want)
		}
		if !errors.Is(err, ErrReplyHeadersTooLarge) {
			t.Errorf("call %d: err = %v, want it to wrap ErrReplyHeadersTooLarge", i+1, err)
		}
		if len(err.Error()) > 300 {
			t.Errorf("call %d: error text of %d bytes, want it short", i+1, len(err.Error()))
		}
	}
	// Four broken replies of four calls: the breaker opens.
	_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
	if !errors.Is(err, ErrCircuitOpen) {
		t.Errorf("after 4 broken replies: err = %v, want the breaker open", err)
	}
	if n := requestsWithCode(m, "error"); n != 4 {
		t.Errorf(`requests{code="error"} = %d, want 4`, n)
	}
}

// The same over TLS from a gateway that offers HTTP/2 too (as one behind a
// CDN does): the Client speaks HTTP/1.1 to it (h1Transport), so the bound
// and its error are the same, however far over it the headers go. Either
// is transient and counted as "error".
func TestOversizedReplyHeadersOverTLS(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		headers int // of 1 KiB each
	}{
		{"just over", 70},
		{"far over", 1024},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor != 1 {
					t.Errorf("request over %s, want HTTP/1.1", r.Proto)
				}
				for i := range tt.headers {
					w.Header().Set(fmt.Sprintf("X-Pad-%d", i), strings.Repeat("a", 1<<10))
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"charge_id":"ch_1","status":"succeeded"}`))
			}))
			srv.EnableHTTP2 = true
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the client's hang-up mid-reply
			srv.StartTLS()
			t.Cleanup(srv.Close)
			roots := x509.NewCertPool()
			roots.AddCert(srv.Certificate())
			c, m := newClient(t, srv.URL, 5*time.Second, WithTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
			res, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			if cl := order.Classify(err); cl != order.ClassTransient {
				t.Fatalf("Charge() = %+v, %v (class %v) with %d KiB of reply headers, want transient", res, err, cl, tt.headers)
			}
			if !errors.Is(err, ErrReplyHeadersTooLarge) {
				t.Errorf("err = %v, want ErrReplyHeadersTooLarge", err)
			}
			if n := requestsWithCode(m, "error"); n != 1 {
				t.Errorf(`requests{code="error"} = %d, want 1`, n)
			}
		})
	}
}

// Reply headers of the size real gateways and the proxies in front of them
// send (cookies, CSP, tracing) still make a reply.
func TestUsualReplyHeadersFit(t *testing.T) {
	t.Parallel()
	base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Security-Policy", strings.Repeat("c", 8<<10))
		for i := range 8 {
			w.Header().Add("Set-Cookie", fmt.Sprintf("c%d=%s", i, strings.Repeat("v", 1<<10)))
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charge_id":"ch_1","status":"succeeded"}`))
	})
	c, _ := newClient(t, base, 5*time.Second)
	if res, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1")); err != nil || res.ChargeID != "ch_1" {
		t.Fatalf("Charge() = %+v, %v with 16 KiB of reply headers, want the charge", res, err)
	}
}

// Credentials planted in the gateway's URL: special characters, so that
// each encoding differs from the plain text.
const (
	plantedUser = "svc-user"
	plantedPass = "p@ss:w/rd é%Z9+x"
)

// credentialForms are the forms of the planted credentials a gateway could
// echo: plain, URL-encoded (as in the URL, as a query, hex in either case),
// quoted, base64 of "user:pass" (the Authorization header) and of the
// password alone, in every base64 alphabet.
func credentialForms() []string {
	pair := plantedUser + ":" + plantedPass
	forms := []string{plantedUser, plantedPass, pair,
		url.UserPassword(plantedUser, plantedPass).String(),
		url.QueryEscape(plantedPass), url.PathEscape(plantedPass),
		strings.ToLower(url.QueryEscape(plantedPass)),
		strings.Trim(fmt.Sprintf("%q", plantedPass), `"`)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		forms = append(forms, enc.EncodeToString([]byte(pair)), enc.EncodeToString([]byte(plantedPass)))
	}
	return forms
}

// echoBody is what a hostile gateway puts in its error text: the request's
// headers (Authorization first, as a debug dump would), then our
// credentials in every form it can derive from them, then padding.
func echoBody(r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Authorization: %s; ", r.Header.Get("Authorization"))
	for k, v := range r.Header {
		fmt.Fprintf(&b, "%s: %s; ", k, strings.Join(v, ","))
	}
	user, pass, _ := r.BasicAuth()
	if user != plantedUser || pass != plantedPass {
		b.WriteString("credentials not sent!")
	}
	for _, f := range credentialForms() {
		b.WriteString(f + " | ")
	}
	b.WriteString(strings.Repeat("pad ", 4096))
	return b.String()
}

// TestGatewayTextNeverCarriesCredentials: a gateway that echoes the
// request's headers and our credentials in every form, in each place its
// text reaches an error (the error and message of a JSON body, the status
// of a 200, a malformed reply that net/http quotes), cannot put them into
// the error (hence x-error, logs) or the span; and its text is cut short.
func TestGatewayTextNeverCarriesCredentials(t *testing.T) {
	t.Parallel()
	jsonReply := func(status int, field string) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{field: echoBody(r)})
		}
	}
	tests := []struct {
		name  string
		h     func(w http.ResponseWriter, r *http.Request)
		class order.Class
	}{
		{"500 message", jsonReply(500, "message"), order.ClassTransient},
		{"500 error", jsonReply(500, "error"), order.ClassTransient},
		{"400 message", jsonReply(400, "message"), order.ClassPermanent},
		{"422 error", jsonReply(422, "error"), order.ClassPermanent},
		{"401 message", jsonReply(401, "message"), order.ClassOutage},
		{"200 status", jsonReply(200, "status"), order.ClassTransient},
		{"malformed header line", func(w http.ResponseWriter, r *http.Request) {
			// A header line without a colon: net/http quotes it in its error.
			echo := strings.ReplaceAll(echoBody(r)[:2000], ":", "=")
			hijackWrite(t, w, "HTTP/1.1 500 Internal Server Error\r\n"+echo+"\r\n\r\n")
		}, order.ClassTransient},
		{"malformed status line", func(w http.ResponseWriter, r *http.Request) {
			echo := strings.NewReplacer(" ", "_", "\r", "", "\n", "").Replace(echoBody(r)[:2000])
			hijackWrite(t, w, echo+"\r\n\r\n")
		}, order.ClassTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := serve(t, tt.h)
			withUser := strings.Replace(base, "http://", "http://"+url.UserPassword(plantedUser, plantedPass).String()+"@", 1)
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c, _ := newClient(t, withUser, 5*time.Second, WithTracerProvider(tp), WithBreaker(BreakerSettings{ConsecutiveNoReply: 100}))
			_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			if cl := order.Classify(err); cl != tt.class {
				t.Fatalf("err = %v (class %v), want %v", err, cl, tt.class)
			}
			msg := err.Error()
			noCredentials(t, "error text", msg)
			if limit := len(c.redacted) + 400; len(msg) > limit {
				t.Errorf("error text of %d bytes, want at most %d: %.300s…", len(msg), limit, msg)
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error text is not one line: %q", msg)
			}
			for _, sp := range rec.Ended() {
				noCredentials(t, "span status", sp.Status().Description)
				for _, kv := range sp.Attributes() {
					noCredentials(t, "span attribute "+string(kv.Key), kv.Value.String())
				}
				for _, ev := range sp.Events() {
					for _, kv := range ev.Attributes {
						noCredentials(t, "span event attribute "+string(kv.Key), kv.Value.String())
					}
				}
			}
		})
	}
}

func noCredentials(t *testing.T, where, text string) {
	t.Helper()
	for _, f := range credentialForms() {
		if strings.Contains(text, f) {
			t.Errorf("%s holds the credentials as %q: %.400s", where, f, text)
		}
	}
	// What is left of a cut form: the first 8 bytes of the base64 of
	// "user:pass" already name the user.
	if p := base64.StdEncoding.EncodeToString([]byte(plantedUser + ":" + plantedPass))[:8]; strings.Contains(text, p) {
		t.Errorf("%s holds the start of the Authorization header %q: %.400s", where, p, text)
	}
}

// hijackWrite takes the connection and writes raw as the reply.
func hijackWrite(t *testing.T, w http.ResponseWriter, raw string) {
	conn, bw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	_, _ = bw.WriteString(raw)
	_ = bw.Flush()
}

// The scrubber guards the Client's own text: a text with any form of the
// credentials (also the start of one, the user alone when it is the key)
// is withheld whole, a text without them is kept, on one line.
func TestScrubberWithholdsWholeTexts(t *testing.T) {
	t.Parallel()
	s := newScrubber(url.UserPassword(plantedUser, plantedPass))
	auth := base64.StdEncoding.EncodeToString([]byte(plantedUser + ":" + plantedPass))
	for _, in := range append(credentialForms(),
		"echo: Basic "+auth[:12]+"…",
		"echo: Basic "+auth[:9],
		"echo: "+strings.Repeat(plantedUser, 3),
	) {
		if got := s.clean("dial tcp 10.0.0.1:443: " + in); got != withheld {
			t.Errorf("clean(%q) = %q, want it withheld", in, got)
		}
	}
	if got := s.clean("dial tcp 10.0.0.1:443:\nconnect: connection refused"); got != "dial tcp 10.0.0.1:443: connect: connection refused" {
		t.Errorf("clean of a text without credentials = %q, want it kept on one line", got)
	}
	// Without user info nothing is withheld; a user alone (an API key) is
	// a credential too.
	if got := newScrubber(nil).clean("Basic abc"); got != "Basic abc" {
		t.Errorf("clean without credentials = %q", got)
	}
	if got := newScrubber(url.User("sk_live_123")).clean("key sk_live_123 refused; ok"); got != withheld {
		t.Errorf("clean with a user alone = %q, want it withheld", got)
	}
}

// The code label takes a bounded set of values, whatever status a gateway
// sends: the codes docs/interface.md §6 names and the registered 5xx codes as
// themselves, every other one as "other", no reply as "error".
func TestCodeLabelIsBounded(t *testing.T) {
	t.Parallel()
	known := CodeLabels()
	var mu sync.Mutex
	statuses := []int{299, 599, 999, 418, 499, 302, 600, 777, 201, 503}
	base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		s := statuses[0]
		statuses = statuses[1:]
		mu.Unlock()
		w.WriteHeader(s)
	})
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, false)
	c, err := NewClient(base, 5*time.Second, WithMetrics(&metrics.Gateway{Requests: m.PaymentRequests, Duration: m.PaymentDuration}), WithBreaker(BreakerSettings{MinRequests: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	for range 10 {
		_, _ = c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "billing_payment_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "code" {
					got = append(got, lp.GetValue())
				}
			}
		}
	}
	for _, code := range got {
		if !slices.Contains(known, code) {
			t.Errorf("code label %q: not one of %v", code, known)
		}
	}
	for code, want := range map[string]int{"other": 8, "201": 1, "503": 1} {
		if n := requestsWithCode(m, code); n != want {
			t.Errorf("requests{code=%q} = %d, want %d", code, n, want)
		}
	}
}

// Every status maps into CodeLabels, each §6 code is its own label, the
// codes internal/metrics creates at zero are among the labels, and the
// Client creates each of its labels at zero.
func TestCodeLabels(t *testing.T) {
	t.Parallel()
	known := CodeLabels()
	for s := 100; s <= 999; s++ {
		if l := codeLabel(s); !slices.Contains(known, l) {
			t.Errorf("codeLabel(%d) = %q, not in %v", s, l, known)
		}
	}
	for _, s := range []int{200, 201, 400, 401, 402, 403, 404, 409, 422, 429, 500, 501, 502, 503, 504, 511} {
		if l := codeLabel(s); l != fmt.Sprint(s) {
			t.Errorf("codeLabel(%d) = %q, want its own label", s, l)
		}
	}
	for _, s := range []int{202, 299, 302, 405, 413, 499, 509, 599, 600, 999} {
		if l := codeLabel(s); l != CodeOther {
			t.Errorf("codeLabel(%d) = %q, want %q", s, l, CodeOther)
		}
	}
	for _, code := range metrics.PaymentCodes {
		if !slices.Contains(known, code) {
			t.Errorf("metrics.PaymentCodes has %q, which the Client never counts", code)
		}
	}
	if len(known) > 32 {
		t.Errorf("%d code labels, want a short list", len(known))
	}
	_, m := newClient(t, "http://gw.local", time.Second)
	for _, code := range known {
		// WithLabelValues would create it: look at what was collected.
		if testutilCount(t, m, code) != 0 {
			t.Errorf("requests{code=%q} not created at zero", code)
		}
	}
}

// testutilCount returns the value of requests{code} as collected, or -1 when
// the series does not exist.
func testutilCount(t *testing.T, m *metrics.Metrics, code string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { m.PaymentRequests.Collect(ch); close(ch) }()
	found := -1.0
	for mt := range ch {
		var pb dto.Metric
		if err := mt.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, lp := range pb.GetLabel() {
			if lp.GetName() == "code" && lp.GetValue() == code {
				found = pb.GetCounter().GetValue()
			}
		}
	}
	return found
}
