package httpgateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// Credentials long enough that their base64 spans more than one 76-column
// line, with spaces (so that a newline can split them) and characters that
// every encoding changes.
const (
	longUser = "svc-billing"
	longPass = "correct horse battery staple / é%Z9+x & then some more words to pass seventy-six columns"
)

// issueEncodings are the forms of the credentials that got past the deny-list
// scrubber (issue 30 point 2), as a hostile gateway writes them.
func issueEncodings() map[string]string {
	pair := longUser + ":" + longPass
	auth := base64.StdEncoding.EncodeToString([]byte(pair))
	var wrapped strings.Builder // the Authorization value in 76-column lines, as MIME writes base64
	for i := 0; i < len(auth); i += 76 {
		wrapped.WriteString(auth[i:min(i+76, len(auth))] + "\r\n")
	}
	blob := "GET /x HTTP/1.1\r\nHost: gw\r\nX-Debug: " + pair + "\r\n\r\n"
	return map[string]string{
		"password split by newlines": strings.ReplaceAll(longPass, " ", "\n"),
		"base64 in 76-column lines":  "Authorization: Basic " + wrapped.String(),
		"hex":                        hex.EncodeToString([]byte(longPass)),
		"upper-case hex":             strings.ToUpper(hex.EncodeToString([]byte(longPass))),
		"upper case":                 strings.ToUpper(longPass),
		"base64 inside a blob":       "dump=" + base64.StdEncoding.EncodeToString([]byte(blob)),
		"base64 of the header blob":  base64.StdEncoding.EncodeToString([]byte("x" + "Authorization: Basic " + auth + "\r\n")),
	}
}

// holdsCredentials reports whether text holds the long credentials in any
// form a reader could recover: with white space removed and case ignored,
// plain or hex; or, decoding every run of base64 characters at each of its
// four alignments (twice, for base64 of base64), any 12 bytes of the
// password. It is the test's own decoder, independent of the scrubber.
func holdsCredentials(text string) bool {
	squeezed := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return -1
		}
		return r
	}, text)
	low := strings.ToLower(squeezed)
	pass := strings.ToLower(strings.ReplaceAll(longPass, " ", ""))
	if strings.Contains(low, pass[:12]) || strings.Contains(low, hex.EncodeToString([]byte(longPass))[:24]) {
		return true
	}
	return decodedHolds([]byte(squeezed), 2)
}

// decodedHolds decodes the base64 runs of b (depth levels deep) and looks
// for 12 bytes of the password in what they decode to.
func decodedHolds(b []byte, depth int) bool {
	if depth == 0 {
		return false
	}
	isB64 := func(c byte) bool {
		return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
	}
	for i := 0; i < len(b); {
		if !isB64(b[i]) {
			i++
			continue
		}
		j := i
		for j < len(b) && isB64(b[j]) {
			j++
		}
		run := b[i:j]
		i = j
		for off := range 4 {
			if off >= len(run) {
				break
			}
			s := run[off:]
			s = s[:len(s)/4*4]
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				dec := make([]byte, enc.DecodedLen(len(s)))
				n, _ := enc.Decode(dec, s)
				dec = dec[:n]
				for k := 0; k+12 <= len(longPass); k += 6 {
					if bytes.Contains(dec, []byte(longPass[k:k+12])) {
						return true
					}
				}
				if decodedHolds(bytes.ReplaceAll(dec, []byte("\r\n"), nil), depth-1) {
					return true
				}
			}
		}
	}
	return false
}

// The test's decoder finds every encoding: otherwise the test below could
// not fail.
func TestHoldsCredentialsFindsEveryEncoding(t *testing.T) {
	t.Parallel()
	for name, text := range issueEncodings() {
		if !holdsCredentials("some text " + text + " more text") {
			t.Errorf("%s: holdsCredentials(%.80q…) = false", name, text)
		}
	}
	if holdsCredentials("POST https://gw.example/charges: status 500") {
		t.Error("holdsCredentials is true of a text without credentials")
	}
}

// freeText is what a hostile gateway writes, for the test to look for.
const freeText = "FREE-TEXT-OF-THE-GATEWAY"

// TestGatewayFreeTextNeverLeavesTheAdapter (docs/interface.md §6, issue 30 point
// 2): whatever a gateway writes — its error and message, a charge status it
// should not send, a malformed reply that net/http quotes, with the
// credentials in every encoding that beat the scrubber — none of it reaches
// an error text (hence x-error, invoice.reason, the invoice event's
// reason), a span or a log line. What does: the status, and the error code
// when it is a short token.
func TestGatewayFreeTextNeverLeavesTheAdapter(t *testing.T) {
	t.Parallel()
	for name, enc := range issueEncodings() {
		hostile := freeText + " " + enc
		jsonReply := func(status int, fields map[string]string) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(fields)
			}
		}
		cases := []struct {
			name  string
			h     http.HandlerFunc
			class order.Class
		}{
			{"500 message", jsonReply(500, map[string]string{"error": "boom", "message": hostile}), order.ClassTransient},
			{"500 error", jsonReply(500, map[string]string{"error": hostile}), order.ClassTransient},
			{"400 message", jsonReply(400, map[string]string{"message": hostile}), order.ClassPermanent},
			{"404 error", jsonReply(404, map[string]string{"error": hostile}), order.ClassPermanent},
			{"422 error", jsonReply(422, map[string]string{"error": hostile}), order.ClassPermanent},
			{"401 message", jsonReply(401, map[string]string{"message": hostile}), order.ClassOutage},
			{"200 status", jsonReply(200, map[string]string{"status": hostile}), order.ClassTransient},
			{"200 body not JSON", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(200)
				_, _ = w.Write([]byte("x" + hostile))
			}, order.ClassTransient},
			{"malformed header line", func(w http.ResponseWriter, _ *http.Request) {
				line := strings.NewReplacer(":", "=", "\r", " ", "\n", " ").Replace(hostile)
				hijackWrite(t, w, "HTTP/1.1 500 Internal Server Error\r\n"+line+"\r\n\r\n")
			}, order.ClassTransient},
			{"malformed status line", func(w http.ResponseWriter, _ *http.Request) {
				line := strings.NewReplacer(" ", "_", "\r", "", "\n", "").Replace(hostile)
				hijackWrite(t, w, line+"\r\n\r\n")
			}, order.ClassTransient},
		}
		for _, tt := range cases {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				base := serve(t, tt.h)
				withUser := strings.Replace(base, "http://", "http://"+url.UserPassword(longUser, longPass).String()+"@", 1)
				rec := tracetest.NewSpanRecorder()
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
				var logs syncbuf.Buffer
				log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				c, _ := newClient(t, withUser, 5*time.Second, WithTracerProvider(tp), WithLogger(log),
					WithBreaker(BreakerSettings{ConsecutiveNoReply: 100}))
				_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
				if cl := order.Classify(err); cl != tt.class {
					t.Fatalf("err = %v (class %v), want %v", err, cl, tt.class)
				}
				texts := map[string]string{"error text": err.Error(), "log": logs.String()}
				for i, sp := range rec.Ended() {
					texts[fmt.Sprintf("span %d status", i)] = sp.Status().Description
					for _, kv := range sp.Attributes() {
						texts[fmt.Sprintf("span %d attribute %s", i, kv.Key)] = kv.Value.String()
					}
					for _, ev := range sp.Events() {
						for _, kv := range ev.Attributes {
							texts[fmt.Sprintf("span %d event %s attribute %s", i, ev.Name, kv.Key)] = kv.Value.String()
						}
					}
				}
				for where, text := range texts {
					if strings.Contains(text, freeText) || strings.Contains(strings.ToLower(text), strings.ToLower(freeText)) {
						t.Errorf("%s holds the gateway's free text: %.300q", where, text)
					}
					if holdsCredentials(text) {
						t.Errorf("%s holds the credentials: %.300q", where, text)
					}
				}
			})
		}
	}
}

// The gateway's error code reaches the error when it is a short token, and
// is exposed on an *order.GatewayReplyError with the status; anything else
// it writes does not.
func TestGatewayErrorCodeToken(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, code, wantCode string
		status               int
	}{
		{"token", "invalid_request", "invalid_request", 400},
		{"token with dots and dashes", "card.expired-2", "card.expired-2", 500},
		{"64 bytes", strings.Repeat("a", 64), strings.Repeat("a", 64), 404},
		{"65 bytes", strings.Repeat("a", 65), "", 404},
		{"space", "in valid", "", 400},
		{"newline", "a\nb", "", 503},
		{"non-ASCII", "é", "", 400},
		{"empty", "", "", 400},
		{"401 token", "invalid_api_key", "invalid_api_key", 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": tt.code, "message": freeText})
			})
			c, _ := newClient(t, base, 5*time.Second)
			_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			re, ok := errors.AsType[*order.GatewayReplyError](err)
			if !ok {
				t.Fatalf("err = %v, want it to wrap an *order.GatewayReplyError", err)
			}
			if re.StatusCode != tt.status || re.Code != tt.wantCode {
				t.Errorf("GatewayReplyError = {%d %q}, want {%d %q}", re.StatusCode, re.Code, tt.status, tt.wantCode)
			}
			if tt.wantCode != "" && !strings.Contains(err.Error(), tt.wantCode) {
				t.Errorf("error text %q lacks the code %q", err, tt.wantCode)
			}
			if strings.Contains(err.Error(), freeText) {
				t.Errorf("error text %q holds the message", err)
			}
		})
	}
}

// Scrubbing stays where the service's own text could hold its credentials:
// the transport's error for a failed connection, whose address and cause
// the service words itself. A text there that holds the credentials in any
// encoding (here planted in the dialer's error) is withheld whole.
func TestOwnTransportTextWithCredentialsIsWithheld(t *testing.T) {
	t.Parallel()
	for name, enc := range issueEncodings() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			planted := &net.OpError{Op: "dial", Net: "tcp", Addr: fakeAddr("10.0.0.1:443 " + enc),
				Err: &net.DNSError{Err: "lookup failed " + enc, Name: "gw.example"}}
			hc := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, planted })}
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c, _ := newClient(t, "https://"+url.UserPassword(longUser, longPass).String()+"@gw.example", time.Second,
				WithHTTPClient(hc), WithTracerProvider(tp))
			_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			if err == nil {
				t.Fatal("Charge() = nil error with a failing transport")
			}
			if holdsCredentials(err.Error()) {
				t.Errorf("error text holds the credentials: %.300q", err)
			}
			for _, sp := range rec.Ended() {
				if holdsCredentials(sp.Status().Description) {
					t.Errorf("span status holds the credentials: %.300q", sp.Status().Description)
				}
			}
			if !errors.Is(err, planted) {
				t.Errorf("err = %v, want it to wrap the transport's error for errors.Is/As", err)
			}
		})
	}
	// Without credentials in it, the service's own text is kept: the
	// address that refused.
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: fakeAddr("10.0.0.1:443"), Err: &net.DNSError{Err: "no such host", Name: "gw.example"}}
	hc := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, refused })}
	c, _ := newClient(t, "https://"+url.UserPassword(longUser, longPass).String()+"@gw.example", time.Second, WithHTTPClient(hc))
	if _, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1")); err == nil || !strings.Contains(err.Error(), "gw.example") {
		t.Errorf("err = %v, want the host the lookup failed for", err)
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A charge id or an error code can pass every rule of its form and still
// be an echo of the credentials, short enough: neither is kept.
func TestShortEchoesOfTheCredentialsAreNotKept(t *testing.T) {
	t.Parallel()
	echo := base64.RawURLEncoding.EncodeToString([]byte(plantedUser + ":" + plantedPass)) // a token, and printable ASCII
	if order.GatewayCode(echo) == "" || !order.ValidChargeID(echo) {
		t.Fatalf("%q is not both a token and a valid charge id: the test's premise", echo)
	}
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(map[string]int{"ord-charge": http.StatusCreated, "ord-code": http.StatusBadRequest}[orderOf(t, r)])
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "succeeded", "charge_id": echo, "error": echo})
	})
	withUser := strings.Replace(base, "http://", "http://"+url.UserPassword(plantedUser, plantedPass).String()+"@", 1)
	c, m := newClient(t, withUser, 5*time.Second)
	res, err := c.Charge(context.Background(), chargeReq(t, "ord-charge", "cus-1"))
	if err != nil || res.Status != order.ChargeSucceeded || res.ChargeID != "" {
		t.Errorf("Charge() = %+v, %v; want the charge without its id", res, err)
	}
	if n := protocolErrors(m, ProtocolChargeIDCredentials); n != 1 {
		t.Errorf("protocol_errors{kind=%q} = %d, want 1", ProtocolChargeIDCredentials, n)
	}
	_, err = c.Charge(context.Background(), chargeReq(t, "ord-code", "cus-1"))
	if re, ok := errors.AsType[*order.GatewayReplyError](err); !ok || re.StatusCode != http.StatusBadRequest || re.Code != "" {
		t.Errorf("err = %v, want a 400 without its code", err)
	}
	if strings.Contains(err.Error(), echo[:8]) {
		t.Errorf("error text %q holds the echo", err)
	}
}

// orderOf reads the order id of a charge request.
func orderOf(t *testing.T, r *http.Request) string {
	var b struct {
		OrderID string `json:"order_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		t.Errorf("request body: %v", err)
	}
	return b.OrderID
}
