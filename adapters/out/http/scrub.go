package httpgateway

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The text a gateway writes (its error and message, a charge status it
// should not have sent, a malformed reply that net/http quotes in its error)
// reaches error texts, and through them x-error headers, logs and span
// statuses. A gateway, or anything in front of it, may echo the request
// back, Authorization header included: that is the service's own
// credentials (CONTRACT.md §2). A scrubber removes them before any such
// text is used, and cuts it short.

// scrubber removes the forms of one set of credentials from text.
type scrubber struct {
	// forms are the credentials as a gateway could repeat them, longest
	// first, so that "user:pass" goes whole before "user" is looked for.
	forms []string
	// starts are the forms long enough that their start alone names them
	// (the base64 of "user:pass" cut by the gateway's own truncation).
	starts []string
}

// minStart is how much of a long form, at least, is removed when found
// without the rest: 8 base64 characters are 6 bytes of the credentials.
const minStart = 8

// newScrubber returns a scrubber of the credentials in u (the user info of
// the gateway's URL): the user, the password and "user:pass", each plain,
// URL-encoded (as in a URL or a query, hex digits in either case) and as
// Go quotes it (%q, which net/http uses for a malformed reply); the base64
// of "user:pass" (the Basic Authorization header) and of the password
// alone, in the four base64 alphabets. A nil u scrubs nothing.
func newScrubber(u *url.Userinfo) *scrubber {
	s := &scrubber{}
	if u == nil {
		return s
	}
	user := u.Username()
	pass, hasPass := u.Password()
	plain := []string{user, pass, user + ":" + pass, u.String()}
	var forms []string
	for _, p := range plain {
		q := strconv.Quote(p)
		forms = append(forms, p, url.QueryEscape(p), url.PathEscape(p), q[1:len(q)-1])
	}
	for _, f := range forms {
		forms = append(forms, lowerHex(f))
	}
	encoded := []string{user + ":" + pass}
	if hasPass {
		encoded = append(encoded, pass)
	}
	for _, e := range encoded {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			b := enc.EncodeToString([]byte(e))
			forms = append(forms, b)
			if len(b) >= 2*minStart {
				s.starts = append(s.starts, b)
			}
		}
	}
	forms = slices.DeleteFunc(forms, func(f string) bool { return f == "" })
	slices.SortFunc(forms, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	s.forms = slices.Compact(forms)
	return s
}

// lowerHex returns s with the hex digits of its %XX escapes in lower case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lower(b[i+1]), lower(b[i+2])
		}
	}
	return string(b)
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// redacted replaces credentials in text.
const redacted = "***"

// scrub returns text without the credentials: every form whole, and the
// start (minStart bytes or more) of a long one found without its end.
func (s *scrubber) scrub(text string) string {
	for _, f := range s.forms {
		text = strings.ReplaceAll(text, f, redacted)
	}
	for _, f := range s.starts {
		for from := 0; ; {
			i := strings.Index(text[from:], f[:minStart])
			if i < 0 {
				break
			}
			i += from
			n := minStart
			for i+n < len(text) && n < len(f) && text[i+n] == f[n] {
				n++
			}
			text = text[:i] + redacted + text[i+n:]
			from = i + len(redacted)
		}
	}
	return text
}

// clean makes text a gateway wrote fit for an error: without the
// credentials, on one line, at most maxDetail bytes. The credentials go
// first, so that a cut cannot leave a piece of one.
func (s *scrubber) clean(text string) string { return oneLine(s.scrub(text)) }

// ErrReplyHeadersTooLarge is wrapped by the error of a reply whose header
// section exceeds MaxReplyHeaderBytes.
var ErrReplyHeadersTooLarge = errors.New("reply headers too large")

// The errors net/http returns for a reply over MaxResponseHeaderBytes, over
// HTTP/1.x and HTTP/2. net/http exports no sentinel for either; the texts
// are pinned by TestOversizedReplyHeadersAreTheGatewaysFault.
const (
	h1HeadersTooLarge = "server response headers exceeded"
	h2HeadersTooLarge = "response header list larger than advertised limit"
)

// maxErrText bounds the text of a transport error: net/http quotes the
// malformed line of a reply whole.
const maxErrText = 300

// gatewayError is an error of the transport with its text scrubbed and cut.
// It unwraps to the original, so that errors.Is and errors.As still find a
// *net.OpError or a deadline; only its text changes.
type gatewayError struct {
	text string
	err  error
}

func (e *gatewayError) Error() string { return e.text }
func (e *gatewayError) Unwrap() error { return e.err }

// Timeout passes on the original's: net/url's Error.Timeout asks the error
// it wraps directly, not through Unwrap.
func (e *gatewayError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

// scrubbedTransport is the Client's transport under the tracing one: every
// error of a round trip leaves it scrubbed, so the span that records it
// (otelhttp puts err.Error() into the span status) never sees the
// credentials either, and an oversized reply head is ErrReplyHeadersTooLarge.
type scrubbedTransport struct {
	base http.RoundTripper
	s    *scrubber
}

func (t scrubbedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		return resp, nil
	}
	if msg := err.Error(); strings.Contains(msg, h1HeadersTooLarge) || strings.Contains(msg, h2HeadersTooLarge) {
		// net/http's text names only the limit; ours too.
		return resp, fmt.Errorf("%w: the gateway sent more than %d bytes of headers", ErrReplyHeadersTooLarge, MaxReplyHeaderBytes)
	}
	text := oneLineMax(t.s.scrub(err.Error()), maxErrText)
	return resp, &gatewayError{text: text, err: err}
}

// CloseIdleConnections passes on to the base transport, as http.Client
// expects of a transport that keeps connections.
func (t scrubbedTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
