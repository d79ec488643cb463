package httpgateway

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"unicode"
)

// What the Client says about the gateway (docs/interface.md §6). The gateway, or
// anything in front of it, may write anything into a reply, the service's
// own credentials included (a debug echo of the request, its Authorization
// header in some encoding). So none of its text leaves the Client: a reply
// becomes its status and, at most, its error code when that is a short
// token (order.GatewayReplyError); a failed round trip is worded by the
// Client itself (transportText), never by the error's text, which may quote
// the reply (a malformed status or header line, an HTTP/2 GOAWAY's debug
// data, a certificate's names).
//
// What is left is the service's own text: the address it dialled, the host
// it looked up. The credentials of the gateway's URL have no business
// there, but a scrubber guards it all the same, and where it finds any form
// of them it withholds the whole text rather than cut pieces out of it: a
// cut always misses the next encoding.

// scrubber finds the credentials of the gateway's URL in text.
type scrubber struct {
	// needles are the forms of the credentials, each folded (fold).
	needles []string
}

// minNeedle is the shortest form looked for: shorter ones would match
// ordinary words, and hold too little of a secret to matter.
const minNeedle = 4

// newScrubber returns a scrubber of the credentials in u (the user info of
// the gateway's URL): the user, the password, "user:pass", the user info as
// a URL writes it and the Basic Authorization value; each plain,
// URL-encoded, quoted as Go quotes it, in hex, and in base64 (standard and
// URL alphabets) at each of the three alignments it can have inside a
// larger encoded text. A nil u scrubs nothing.
func newScrubber(u *url.Userinfo) *scrubber {
	s := &scrubber{}
	if u == nil {
		return s
	}
	user := u.Username()
	pass, _ := u.Password()
	pair := user + ":" + pass
	seen := map[string]bool{}
	add := func(form string) {
		if f := fold(form); len(f) >= minNeedle && !seen[f] {
			seen[f] = true
			s.needles = append(s.needles, f)
		}
	}
	for _, secret := range []string{user, pass, pair, u.String(), base64.StdEncoding.EncodeToString([]byte(pair))} {
		if secret == "" {
			continue
		}
		q, qa := strconv.Quote(secret), strconv.QuoteToASCII(secret)
		for _, f := range []string{secret, url.QueryEscape(secret), url.PathEscape(secret), q[1 : len(q)-1], qa[1 : len(qa)-1],
			hex.EncodeToString([]byte(secret))} {
			add(f)
		}
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			add(enc.EncodeToString([]byte(secret)))
			for shift := range 3 {
				add(alignedBase64(enc, secret, shift))
			}
		}
	}
	return s
}

// alignedBase64 returns the base64 characters that encode secret alone
// when it starts shift bytes into a 3-byte group of a larger text: the
// characters of the groups that hold only bytes of secret.
func alignedBase64(enc *base64.Encoding, secret string, shift int) string {
	// enc has no padding. Only whole groups hold nothing but secret: the
	// first mixes in what comes before secret (unless shift is 0), a
	// partial last one what follows it.
	b := enc.EncodeToString(append(make([]byte, shift), secret...))
	start, end := 0, (shift+len(secret))/3*4
	if shift > 0 {
		start = 4
	}
	if start >= end {
		return ""
	}
	return b[start:end]
}

// fold makes text comparable whatever a writer did to it: white space and
// control characters removed (a secret split over lines), letters in lower
// case (upper-case hex, a shouted echo).
func fold(text string) string {
	return strings.ToLower(strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return -1
		}
		return r
	}, text))
}

// holds reports whether text holds any form of the credentials.
func (s *scrubber) holds(text string) bool {
	if len(s.needles) == 0 {
		return false
	}
	f := fold(text)
	for _, n := range s.needles {
		if strings.Contains(f, n) {
			return true
		}
	}
	return false
}

// withheld replaces a text that holds the credentials.
const withheld = "(details withheld: they hold a form of the gateway's credentials)"

// clean returns text fit for an error: withheld whole when it holds the
// credentials, otherwise on one line and at most maxErrText bytes.
func (s *scrubber) clean(text string) string {
	if s.holds(text) {
		return withheld
	}
	return oneLineMax(text, maxErrText)
}

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

// maxErrText bounds the Client's own text about a failed round trip.
const maxErrText = 300

// transportText words a failed round trip (or a reply body that could not
// be read to its end) in the Client's own terms: the kind of failure, the
// address or host concerned, an errno's fixed text. It never uses the
// error's own text beyond those, since net/http and crypto/tls quote the
// gateway's bytes in theirs.
func transportText(err error) string {
	var (
		dnsErr  *net.DNSError
		opErr   *net.OpError
		certErr *tls.CertificateVerificationError
		alert   tls.AlertError
		record  tls.RecordHeaderError
		errno   syscall.Errno
		timeout interface{ Timeout() bool }
	)
	where := "connection"
	if errors.As(err, &opErr) && opErr.Addr != nil {
		where = opErr.Op + " " + opErr.Addr.String()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return where + ": timed out"
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("lookup %s: %s", dnsErr.Name, dnsErr.Err)
	case errors.As(err, &certErr):
		// Its details quote the certificate, which the gateway chose.
		return "TLS handshake: the gateway's certificate was not accepted"
	case errors.As(err, &alert):
		return "TLS handshake: " + alert.Error() // a fixed text per alert
	case errors.As(err, &record):
		return "TLS handshake: the gateway did not answer in TLS"
	case errors.As(err, &errno):
		return where + ": " + errno.Error() // a fixed text per errno: connection refused, reset by peer…
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before the reply was complete"
	}
	return "reply broken or malformed (details withheld: they may quote the gateway's reply)"
}

// gatewayError is a failed round trip in the Client's own words. It
// unwraps to the original, so that errors.Is and errors.As still find a
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

// ownWords returns err, a failed round trip or body read, worded by
// transportText and scrubbed.
func (s *scrubber) ownWords(err error) *gatewayError {
	return &gatewayError{text: s.clean(transportText(err)), err: err}
}

// ownWordsTransport is the Client's transport under the tracing one: every
// error of a round trip leaves it in the Client's own words, so the span
// that records it (otelhttp puts err.Error() into the span status) never
// sees the gateway's text either, and an oversized reply head is
// ErrReplyHeadersTooLarge.
type ownWordsTransport struct {
	base http.RoundTripper
	s    *scrubber
}

func (t ownWordsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil {
		body := resp.Body
		if body == nil { // a transport's empty reply, as http.Client reads it
			body = http.NoBody
		}
		// A body that breaks off is worded here too: otelhttp records the
		// body's read error in the span.
		resp.Body = ownWordsBody{ReadCloser: body, s: t.s}
		return resp, nil
	}
	if errors.Is(err, ErrReplyHeadersTooLarge) { // h1Transport's, in our words already
		return resp, err
	}
	if msg := err.Error(); strings.Contains(msg, h1HeadersTooLarge) || strings.Contains(msg, h2HeadersTooLarge) {
		// net/http's text names only the limit; ours too.
		return resp, fmt.Errorf("%w: the gateway sent more than %d bytes of headers", ErrReplyHeadersTooLarge, MaxReplyHeaderBytes)
	}
	return resp, t.s.ownWords(err)
}

// ownWordsBody is a reply body whose read errors are in the Client's own
// words (io.EOF stays io.EOF).
type ownWordsBody struct {
	io.ReadCloser
	s *scrubber
}

func (b ownWordsBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.s.ownWords(err)
	}
	return n, err
}

// CloseIdleConnections passes on to the base transport, as http.Client
// expects of a transport that keeps connections.
func (t ownWordsTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
