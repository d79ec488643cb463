package httpgateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/poll"
)

// connCounter is an httptest server that counts the connections opened to it.
type connCounter struct {
	*httptest.Server
	opened atomic.Int32
}

func countingServer(t *testing.T, h http.HandlerFunc) *connCounter {
	t.Helper()
	cs := &connCounter{Server: httptest.NewUnstartedServer(h)}
	cs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			cs.opened.Add(1)
		}
	}
	cs.Start()
	t.Cleanup(func() {
		cs.CloseClientConnections()
		cs.Close()
	})
	return cs
}

// newH1 is the transport NewCaller builds, on net/http's defaults.
func newH1(t *testing.T, tweak func(*http.Transport)) *h1Transport {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = DefaultIdleConns
	tr.MaxResponseHeaderBytes = MaxReplyHeaderBytes
	tr.DisableCompression = true
	if tweak != nil {
		tweak(tr)
	}
	h := newH1Transport(tr)
	t.Cleanup(h.CloseIdleConnections)
	return h
}

// get sends a GET through rt and reads the whole reply.
func get(t *testing.T, rt http.RoundTripper, ctx context.Context, u string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestIdleConnectionsHoldNoGoroutines: the gateway's connections are
// read and written by the goroutine that sends the request, so a
// connection waiting for the next one holds no goroutine, and a request
// costs no hand-off between goroutines. net/http's Transport keeps a
// reading and a writing goroutine per connection.
func TestIdleConnectionsHoldNoGoroutines(t *testing.T) {
	const n = 8
	release := make(chan struct{})
	var arrived atomic.Int32
	cs := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if arrived.Add(1) == n {
			close(release)
		}
		<-release // n requests at once: n connections
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge_id":"ch_1","status":"succeeded"}`)
	})
	c, _ := newClient(t, cs.URL, 10*time.Second)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := c.Charge(context.Background(), chargeReq(t, fmt.Sprintf("ord-%d", i), "cus")); err != nil {
				t.Errorf("Charge() error = %v", err)
			}
		})
	}
	wg.Wait()
	if got := cs.opened.Load(); got != n {
		t.Fatalf("opened %d connections, want %d", got, n)
	}
	// Other tests' connections may still be closing: wait for their
	// goroutines to end, never for these n idle ones (which would fail).
	held := func() string {
		var sb strings.Builder
		if err := pprof.Lookup("goroutine").WriteTo(&sb, 1); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"net/http.(*persistConn).readLoop", "net/http.(*persistConn).writeLoop"} {
			if strings.Contains(sb.String(), f) {
				return f
			}
		}
		return ""
	}
	poll.Until(t, fmt.Sprintf("no goroutine held by %d idle connections", n), 2*time.Second, func() bool { return held() == "" })
}

// TestH1ReusesAConnectionReadToTheEnd: a reply read to its end, with a
// length or chunked, leaves its connection for the next request.
func TestH1ReusesAConnectionReadToTheEnd(t *testing.T) {
	t.Parallel()
	cs := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("chunked") {
			w.(http.Flusher).Flush() // no length known: chunked
		}
		_, _ = io.WriteString(w, "ok")
	})
	rt := newH1(t, nil)
	for _, q := range []string{"", "?chunked", "", "?chunked"} {
		code, body, err := get(t, rt, context.Background(), cs.URL+q)
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("GET %s = %d %q, %v", q, code, body, err)
		}
	}
	if got := cs.opened.Load(); got != 1 {
		t.Errorf("four requests opened %d connections, want 1", got)
	}
}

// TestH1ClosesWhatItCannotReuse: a connection is reused only after a reply
// read to its end that neither side asked to end the connection with.
func TestH1ClosesWhatItCannotReuse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		send func(t *testing.T, rt http.RoundTripper, u string)
	}{
		{"body closed unread", func(t *testing.T, rt http.RoundTripper, u string) {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
		}},
		{"reply asks to close", func(t *testing.T, rt http.RoundTripper, u string) {
			if _, _, err := get(t, rt, context.Background(), u+"?close"); err != nil {
				t.Fatal(err)
			}
		}},
		{"request asks to close", func(t *testing.T, rt http.RoundTripper, u string) {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			req.Close = true
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Has("close") {
					w.Header().Set("Connection", "close")
				}
				_, _ = io.WriteString(w, strings.Repeat("x", 64<<10)) // more than a buffer
			})
			rt := newH1(t, nil)
			tt.send(t, rt, cs.URL)
			rt.mu.Lock()
			idle := len(rt.hosts[h1Key{host: strings.TrimPrefix(cs.URL, "http://")}].idle)
			rt.mu.Unlock()
			if idle != 0 {
				t.Errorf("%d idle connections, want 0", idle)
			}
			if _, _, err := get(t, rt, context.Background(), cs.URL); err != nil {
				t.Fatal(err)
			}
			if got := cs.opened.Load(); got != 2 {
				t.Errorf("opened %d connections, want 2 (the first one not reused)", got)
			}
		})
	}
}

// rawServer reads a first request on each connection and answers it with
// serve, which may go on reading br; n counts the connections from 0.
func rawServer(t *testing.T, serve func(n int, c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	return "http://" + listen(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		serve(n, c, br)
	})
}

// listen serves each connection of a loopback listener with serve, n
// counting them from 0, and closes it after; it returns the address.
func listen(t *testing.T, serve func(n int, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(n, c)
			})
		}
	})
	return ln.Addr().String()
}

// TestH1InformationalReplies: 1xx replies before the final one are
// skipped, each with a head bound of its own, and no more than five.
func TestH1InformationalReplies(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a", MaxReplyHeaderBytes/2)
	for _, tt := range []struct {
		name    string
		n1xx    int
		wantErr bool
	}{
		{"five", 5, false},
		{"six", 6, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := rawServer(t, func(_ int, c net.Conn, _ *bufio.Reader) {
				for range tt.n1xx { // together past the bound, each within it
					_, _ = fmt.Fprintf(c, "HTTP/1.1 103 Early Hints\r\nX-Pad: %s\r\n\r\n", big)
				}
				_, _ = io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
			})
			code, body, err := get(t, newH1(t, nil), context.Background(), u)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("GET after %d 1xx replies = %d, want an error", tt.n1xx, code)
				}
				return
			}
			if err != nil || code != 201 || body != "ok" {
				t.Fatalf("GET after %d 1xx replies = %d %q, %v; want 201", tt.n1xx, code, body, err)
			}
		})
	}
}

// TestH1ResendsOnAConnectionTheServerClosed: a request that a reused
// connection fails before any byte of a reply (the server closed it as the
// request arrived) is sent again on a new connection when net/http would: it
// is idempotent by its method or its Idempotency-Key. A POST without a key
// is not, and fails. Either way every connection that carried it is
// reported (GotConn: Caller.send's carried).
func TestH1ResendsOnAConnectionTheServerClosed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		method     string
		key        bool
		wantResend bool
	}{
		{"GET", http.MethodGet, false, true},
		{"POST with a key", http.MethodPost, true, true},
		{"POST without a key", http.MethodPost, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := rawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				if n == 0 { // the first connection: the request after it read, then closed unanswered
					if req, err := http.ReadRequest(br); err == nil {
						_, _ = io.Copy(io.Discard, req.Body)
					}
				}
			})
			rt := newH1(t, nil)
			if _, _, err := get(t, rt, context.Background(), u); err != nil {
				t.Fatal(err)
			}
			var conns atomic.Int32
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(httptrace.GotConnInfo) { conns.Add(1) },
			})
			req, err := http.NewRequestWithContext(ctx, tt.method, u, strings.NewReader(`{"a":1}`))
			if err != nil {
				t.Fatal(err)
			}
			if tt.key {
				req.Header.Set(HeaderIdempotencyKey, "k-1")
			}
			resp, err := rt.RoundTrip(req)
			if tt.wantResend {
				if err != nil {
					t.Fatalf("RoundTrip() error = %v, want the reply of a resend", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if got := conns.Load(); got != 2 {
					t.Errorf("GotConn %d times, want 2 (the closed connection, then a new one)", got)
				}
				return
			}
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("RoundTrip() = %d, want an error: the request is not replayable", resp.StatusCode)
			}
			if got := conns.Load(); got != 1 {
				t.Errorf("GotConn %d times, want 1", got)
			}
		})
	}
}

// TestH1ContextBoundsTheWholeRequest: the request's context ends it while
// the head or the body is awaited; the error is the context's, and the
// connection is not kept.
func TestH1ContextBoundsTheWholeRequest(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		inBody bool
	}{
		{"awaiting the head", false},
		{"awaiting the body", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gone := make(chan struct{})
			u := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
				if tt.inBody {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
				}
				_, _ = io.Copy(io.Discard, br) // until the client closes
				close(gone)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, _, err := get(t, newH1(t, nil), ctx, u)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error = %v, want context.DeadlineExceeded", err)
			}
			select {
			case <-gone:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection is still open")
			}
		})
	}
}

// TestH1OversizedHead: a reply head past the bound, by a byte or by far,
// is ErrReplyHeadersTooLarge; one just within it is a reply.
func TestH1OversizedHead(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		size    int // of the head, its final CRLF included
		wantErr bool
	}{
		{"within", MaxReplyHeaderBytes - 64, false},
		{"a byte over", MaxReplyHeaderBytes + 1, true},
		{"far over", 4 * MaxReplyHeaderBytes, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
				head := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Pad: "
				head += strings.Repeat("a", tt.size-len(head)-4) + "\r\n\r\n"
				_, _ = io.WriteString(c, head+"ok")
				_, _ = io.Copy(io.Discard, br) // until the client closes
			})
			code, body, err := get(t, newH1(t, nil), context.Background(), u)
			if tt.wantErr != errors.Is(err, ErrReplyHeadersTooLarge) || (!tt.wantErr && body != "ok") {
				t.Fatalf("a head of %d bytes: GET = %d %q, %v; want ErrReplyHeadersTooLarge %v", tt.size, code, body, err, tt.wantErr)
			}
		})
	}
}

// TestH1IdleConnectionsAreBounded: no more idle connections per host than
// the cap, and none older than the idle timeout is reused.
func TestH1IdleConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	const n = 4
	release := make(chan struct{})
	var arrived atomic.Int32
	cs := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("wave") && arrived.Add(1) == n {
			close(release)
		}
		if r.URL.Query().Has("wave") {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	rt := newH1(t, func(tr *http.Transport) { tr.MaxIdleConnsPerHost = 2 })
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, _, err := get(t, rt, context.Background(), cs.URL+"?wave"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	rt.mu.Lock()
	idle := len(rt.hosts[h1Key{host: strings.TrimPrefix(cs.URL, "http://")}].idle)
	rt.mu.Unlock()
	if idle != 2 {
		t.Errorf("%d idle connections after %d at once, want the cap, 2", idle, n)
	}
	rt.idleTimeout = time.Nanosecond // every idle one is too old now
	if _, _, err := get(t, rt, context.Background(), cs.URL); err != nil {
		t.Fatal(err)
	}
	if got := cs.opened.Load(); got != n+1 {
		t.Errorf("opened %d connections, want %d: an idle connection past its timeout was reused", got, n+1)
	}
}

// TestH1OverTLSSpeaksHTTP11: over TLS the transport offers only
// http/1.1, so a gateway that also speaks HTTP/2 is spoken HTTP/1.1 to,
// with the configured roots, on one reused connection.
func TestH1OverTLSSpeaksHTTP11(t *testing.T) {
	t.Parallel()
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the bare client's refused handshake
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	rt := newH1(t, func(tr *http.Transport) {
		// Even a configuration that offers h2 is narrowed to http/1.1.
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	})
	for range 3 {
		code, body, err := get(t, rt, context.Background(), srv.URL)
		if err != nil || code != 200 || body != "HTTP/1.1" {
			t.Fatalf("GET = %d %q, %v; want 200 over HTTP/1.1", code, body, err)
		}
	}
	if got := opened.Load(); got != 1 {
		t.Errorf("opened %d connections, want 1", got)
	}
	// Roots it was not given: the handshake fails, and nothing is sent.
	bare := newH1(t, nil)
	if _, _, err := get(t, bare, context.Background(), srv.URL); err == nil {
		t.Error("GET with the system roots succeeded, want a certificate error")
	}
}

// TestH1LeavesProxiedRequestsToNetHTTP: a request the proxy settings send
// to a proxy goes through net/http's Transport, to the proxy.
func TestH1LeavesProxiedRequestsToNetHTTP(t *testing.T) {
	t.Parallel()
	var viaProxy atomic.Bool
	proxy := serve(t, func(w http.ResponseWriter, r *http.Request) {
		viaProxy.Store(r.URL.IsAbs()) // a proxy is asked for an absolute URL
		_, _ = io.WriteString(w, "proxied")
	})
	pu, err := url.Parse(proxy)
	if err != nil {
		t.Fatal(err)
	}
	rt := newH1(t, func(tr *http.Transport) { tr.Proxy = http.ProxyURL(pu) })
	code, body, err := get(t, rt, context.Background(), "http://gateway.invalid/charges")
	if err != nil || code != 200 || body != "proxied" || !viaProxy.Load() {
		t.Fatalf("GET = %d %q, %v (via the proxy: %v); want the proxy's reply", code, body, err, viaProxy.Load())
	}
}

// TestH1ConcurrentRequests: requests at once share and reuse connections
// safely (run with -race).
func TestH1ConcurrentRequests(t *testing.T) {
	t.Parallel()
	cs := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	rt := newH1(t, nil)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				want := fmt.Sprintf("w%d-%d", w, i)
				req, _ := http.NewRequest(http.MethodPost, cs.URL, strings.NewReader(want))
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || string(b) != want {
					t.Errorf("reply %q, %v; want %q", b, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := cs.opened.Load(); got > workers {
		t.Errorf("opened %d connections for %d workers, want at most %d", got, workers, workers)
	}
}

// perConn counts the requests each connection of a test server carried.
type perConn struct {
	mu     sync.Mutex
	counts []int
}

func (p *perConn) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.counts) <= n {
		p.counts = append(p.counts, 0)
	}
	p.counts[n]++
}

func (p *perConn) get() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.counts)
}

// countingRaw is a raw server that counts the requests each connection
// carried and answers each with reply(n, i): connection n's request i.
func countingRaw(t *testing.T, reply func(n, i int) string, after func(n int, c net.Conn)) (string, func() []int) {
	t.Helper()
	var pc perConn
	u := rawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			pc.add(n)
			_, _ = io.WriteString(c, reply(n, i))
			if after != nil {
				after(n, c)
			}
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
		}
	})
	return u, pc.get
}

// chargeTwice sends two keyed POSTs through rt to a server that answers
// the first connection's first request 200 and then something after it,
// and any other connection's 402: the second must get its own reply, each
// sent once, the second on a new connection.
func chargeTwice(t *testing.T, rt http.RoundTripper, ctx context.Context, u string, counts func() []int) {
	t.Helper()
	if code, _, _, err := keyedPost(t, rt, ctx, u); err != nil || code != 200 {
		t.Fatalf("first POST = %d, %v", code, err)
	}
	code, body, _, err := keyedPost(t, rt, ctx, u)
	if err != nil || code != 402 || body != "declined" {
		t.Errorf("second POST = %d %q, %v; want its own reply, 402", code, body, err)
	}
	if got := counts(); !slices.Equal(got, []int{1, 1}) {
		t.Errorf("requests per connection %v, want [1 1]: each sent once, the second on a new connection", got)
	}
}

// keyedPost sends a POST with an Idempotency-Key through rt, counting the
// connections that carried it, and reads the whole reply.
func keyedPost(t *testing.T, rt http.RoundTripper, ctx context.Context, u string) (int, string, int, error) {
	t.Helper()
	var conns atomic.Int32
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderIdempotencyKey, "k-1")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", int(conns.Load()), err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), int(conns.Load()), err
}

// TestH1StrayBytesAfterAReplyEndTheConnection: bytes after a reply (a
// stray CRLF, a second reply nobody asked for) are never read as the next
// request's reply: that connection is not reused, and the next charge is
// sent once, on a new one, and gets its own reply.
func TestH1StrayBytesAfterAReplyEndTheConnection(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, stray string }{
		{"a CRLF", "\r\n"},
		{"a second reply", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsucceeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, counts := countingRaw(t, func(n, _ int) string {
				if n == 0 {
					return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + tt.stray
				}
				return "HTTP/1.1 402 Payment Required\r\nContent-Length: 8\r\n\r\ndeclined"
			}, nil)
			chargeTwice(t, newH1(t, nil), context.Background(), u, counts)
		})
	}
}

// TestH1DropsAConnectionClosedWhileIdle: a connection the server closed
// while it was idle, with or without a 408 first, is dropped before a
// request is written on it: the request goes once, on a new connection,
// even one no rule would send again (a POST without a key).
func TestH1DropsAConnectionClosedWhileIdle(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, last string }{
		{"closed", ""},
		{"408, then closed", "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			closed := make(chan struct{})
			u, counts := countingRaw(t, func(int, int) string { return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" },
				func(n int, c net.Conn) {
					if n == 0 {
						_, _ = io.WriteString(c, tt.last)
						_ = c.Close()
						close(closed)
					}
				})
			rt := newH1(t, nil)
			if _, _, err := get(t, rt, context.Background(), u); err != nil {
				t.Fatal(err)
			}
			<-closed
			// The close reaches the client's socket on its own time (the 408
			// may come with the reply: then the connection is not kept at all).
			poll.Until(t, "the idle connection seen closed", 5*time.Second, func() bool {
				rt.mu.Lock()
				defer rt.mu.Unlock()
				idle := rt.hosts[h1Key{host: strings.TrimPrefix(u, "http://")}].idle
				return len(idle) == 0 || !idle[0].quiet()
			})
			req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"a":1}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("POST without a key after an idle close: %v, want the reply of a new connection", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if got := counts(); !slices.Equal(got, []int{1, 1}) {
				t.Errorf("requests per connection %v, want [1 1]", got)
			}
		})
	}
}

// TestH1SendsNothingOnceItsContextEnded: a request whose context ended
// before it was sent is not written, not even on an idle connection.
func TestH1SendsNothingOnceItsContextEnded(t *testing.T) {
	t.Parallel()
	u, counts := countingRaw(t, func(int, int) string { return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }, nil)
	rt := newH1(t, nil)
	if _, _, err := get(t, rt, context.Background(), u); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 { // the idle connection's write would often win the race
		if _, _, _, err := keyedPost(t, rt, ctx, u); !errors.Is(err, context.Canceled) {
			t.Fatalf("POST with an ended context: %v, want context.Canceled", err)
		}
	}
	if _, _, err := get(t, rt, context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if got := counts(); !slices.Equal(got, []int{2}) {
		t.Errorf("requests per connection %v, want [2]: only the two GETs", got)
	}
}

// TestH1BodyReadAfterClose: a body read after Close fails, as net/http's
// does, rather than reading as a complete, empty body.
func TestH1BodyReadAfterClose(t *testing.T) {
	t.Parallel()
	cs := countingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, strings.Repeat("x", 64<<10)) })
	req, _ := http.NewRequest(http.MethodGet, cs.URL, nil)
	resp, err := newH1(t, nil).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("read after Close: %v, want http.ErrBodyReadAfterClose", err)
	}
}

// failingBody fails its read: a request body that cannot be read.
type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("body unreadable") }

// TestH1NoResendOfItsOwnFailure: a request that failed on its own (its
// body could not be read), not on its connection, is not sent again, as
// net/http would not.
func TestH1NoResendOfItsOwnFailure(t *testing.T) {
	t.Parallel()
	u, counts := countingRaw(t, func(int, int) string { return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" }, nil)
	rt := newH1(t, nil)
	if _, _, err := get(t, rt, context.Background(), u); err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, io.NopCloser(failingBody{}))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 7
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(failingBody{}), nil }
	req.Header.Set(HeaderIdempotencyKey, "k-1")
	if resp, err := rt.RoundTrip(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("POST of an unreadable body succeeded, want its error")
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("GotConn %d times, want 1: not sent again", n)
	}
	// The POST's head may have reached the server before its body failed;
	// a second connection never opened.
	if got := counts(); len(got) != 1 {
		t.Errorf("requests per connection %v, want one connection", got)
	}
}

// corkConn holds a server's writes until flush, so that a reply's TLS
// record and what follows it leave in one TCP write: crypto/tls then reads
// them off the socket together, past the socket's peek.
type corkConn struct {
	net.Conn
	mu   sync.Mutex
	cork bool
	buf  []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cork {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) hold() {
	c.mu.Lock()
	c.cork = true
	c.mu.Unlock()
}

func (c *corkConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cork = false
	_, _ = c.Conn.Write(c.buf)
	c.buf = nil
}

// TestH1OverTLSWhatTLSHeldEndsTheConnection: over TLS, what came with a
// reply's last record (a stray record, a close_notify while the server
// still reads) is held by crypto/tls, where neither the reply buffer's
// check nor the socket's peek sees it; the next charge still goes once,
// on a new connection, and gets its own reply.
func TestH1OverTLSWhatTLSHeldEndsTheConnection(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		after func(tc *tls.Conn)
	}{
		{"a second reply", func(tc *tls.Conn) {
			_, _ = io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsucceeded")
		}},
		{"a CRLF", func(tc *tls.Conn) { _, _ = io.WriteString(tc, "\r\n") }},
		{"close_notify, still reading", func(tc *tls.Conn) {
			_ = tc.CloseWrite()
			_ = tc.SetWriteDeadline(time.Time{}) // CloseWrite's own deadline would stop the flush
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			srv.StartTLS() // for its certificate
			cfg := srv.TLS.Clone()
			cfg.NextProtos = []string{"http/1.1"}
			roots := x509.NewCertPool()
			roots.AddCert(srv.Certificate())
			srv.Close()
			var pc perConn
			addr := listen(t, func(n int, raw net.Conn) {
				cc := &corkConn{Conn: raw}
				tc := tls.Server(cc, cfg)
				br := bufio.NewReader(tc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					pc.add(n)
					cc.hold()
					if n == 0 {
						_, _ = io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
						tt.after(tc)
					} else {
						_, _ = io.WriteString(tc, "HTTP/1.1 402 Payment Required\r\nContent-Length: 8\r\n\r\ndeclined")
					}
					cc.flush()
				}
			})
			base := "https://" + addr
			rt := newH1(t, func(tr *http.Transport) {
				tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
				tr.Proxy = nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			chargeTwice(t, rt, ctx, base, pc.get)
		})
	}
}
