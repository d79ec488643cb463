package httpgateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// h1Transport carries the gateway's requests over HTTP/1.1 in the goroutine
// that sends them, on connections it keeps for the next request.
//
// net/http's Transport gives every connection a reading and a writing
// goroutine and hands each request and reply between them and the caller
// over channels, with a cancellation context and a select per request: in
// make bench's profiles that machinery, not the syscalls, was most of the
// gateway call, the largest stage of a charged event. Here the caller
// writes the request (Request.Write) and reads the reply head
// (http.ReadResponse) itself: the bytes on the wire are still net/http's
// own, and only the connection's bookkeeping is this file's.
//
// What it keeps of net/http's Transport, because the Caller relies on it:
//   - the reply head bounded by maxHeader (ErrReplyHeadersTooLarge), 1xx
//     replies skipped, at most five of them;
//   - a request that a reused connection failed before any byte of a reply
//     is sent again on another connection when it may be (replayable: the
//     same rule as net/http, which counts an Idempotency-Key), or when none
//     of it was written; GotConn is reported for each connection that
//     carries it (Caller.send's carried);
//   - the request's context bounds everything, the body's reads included,
//     and its error is the error once the context is done;
//   - dial errors are the dialer's *net.OpError (isDialError);
//   - a connection is reused only after its reply was read to the end with
//     nothing after it, and neither side asked to close it; an idle one is
//     looked at before it is reused (quiet: one non-blocking peek), and
//     dropped when the server closed it or sent anything meanwhile, which
//     net/http's reading goroutine finds by waiting;
//   - a request whose context has ended is not written, and a body read
//     after Close fails;
//   - idle connections are capped per host and closed after idleTimeout.
//
// What it leaves to net/http (fallback): a request that goes through a proxy
// (the fallback's Proxy, from the environment by default), and any scheme
// but http and https. Over TLS it offers only http/1.1: a gateway that also
// speaks HTTP/2 is spoken HTTP/1.1 to, one request per connection at a time,
// as over plain http.
type h1Transport struct {
	fallback    *http.Transport
	tls         *tls.Config // nil: crypto/tls's defaults
	dialer      net.Dialer
	maxIdle     int           // per host
	idleTimeout time.Duration // an idle connection older than this is closed, not reused
	maxHeader   int64         // bytes of a reply head, 1xx replies each counted afresh

	mu    sync.Mutex
	hosts map[h1Key]*h1Host
}

// h1Key names a host's connections: its scheme and URL host, as the request
// spells it.
type h1Key struct {
	https bool
	host  string
}

type h1Host struct {
	proxied bool // the fallback's Proxy sends its requests to a proxy
	tls     *tls.Config
	idle    []*h1Conn // oldest first
}

// max1xxReplies is how many 1xx replies may come before the final one, as
// net/http allows.
const max1xxReplies = 5

// newH1Transport returns a transport that leaves to fallback what it does
// not carry itself; tlsCfg, maxIdle and maxHeader as fallback's.
func newH1Transport(fallback *http.Transport) *h1Transport {
	idleTimeout := fallback.IdleConnTimeout
	if idleTimeout <= 0 {
		idleTimeout = 90 * time.Second
	}
	maxIdle := fallback.MaxIdleConnsPerHost
	if maxIdle <= 0 {
		maxIdle = http.DefaultMaxIdleConnsPerHost
	}
	maxHeader := fallback.MaxResponseHeaderBytes
	if maxHeader <= 0 {
		maxHeader = 10 << 20 // net/http's own for zero
	}
	return &h1Transport{
		fallback:    fallback,
		tls:         fallback.TLSClientConfig,
		dialer:      net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle:     maxIdle,
		idleTimeout: idleTimeout,
		maxHeader:   maxHeader,
		hosts:       make(map[h1Key]*h1Host),
	}
}

// RoundTrip sends req and reads the head of its reply. The reply's body
// must be read to its end or closed; either ends the request.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var key h1Key
	switch req.URL.Scheme {
	case "http":
	case "https":
		key.https = true
	default:
		return t.fallback.RoundTrip(req)
	}
	key.host = req.URL.Host
	h, err := t.host(req, key)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if h.proxied {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil { // nothing of it may leave now
		closeBody(req)
		return nil, err
	}
	trace := httptrace.ContextClientTrace(ctx)
	for {
		c, reused, err := t.conn(ctx, key, h)
		if err != nil {
			closeBody(req)
			return nil, ctxErr(ctx, err)
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(httptrace.GotConnInfo{Conn: c.nc, Reused: reused, WasIdle: reused})
		}
		resp, err := t.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil || !reused || !resendable(req, c, err) {
			return nil, ctxErr(ctx, err)
		}
		// The connection the server had closed while it was idle: send the
		// request again, as net/http does.
		if req, err = rewound(req); err != nil {
			return nil, err
		}
	}
}

// host returns what the transport knows of key's host, learning once
// whether its requests go through a proxy (the environment net/http reads
// once per process, or the fallback's own Proxy).
func (t *h1Transport) host(req *http.Request, key h1Key) (*h1Host, error) {
	t.mu.Lock()
	h := t.hosts[key]
	t.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h = &h1Host{}
	if t.fallback.Proxy != nil {
		u, err := t.fallback.Proxy(req)
		if err != nil {
			return nil, err
		}
		h.proxied = u != nil
	}
	if key.https {
		cfg := &tls.Config{}
		if t.tls != nil {
			cfg = t.tls.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = req.URL.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		h.tls = cfg
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.hosts[key]; old != nil {
		return old, nil
	}
	t.hosts[key] = h
	return h, nil
}

// conn returns an idle connection to key's host, or a new one.
func (t *h1Transport) conn(ctx context.Context, key h1Key, h *h1Host) (*h1Conn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	var stale []*h1Conn
	for len(h.idle) > 0 && now.Sub(h.idle[0].idleSince) > t.idleTimeout {
		stale = append(stale, h.idle[0])
		h.idle[0] = nil
		h.idle = h.idle[1:]
	}
	var c *h1Conn
	if n := len(h.idle); n > 0 {
		c = h.idle[n-1]
		h.idle[n-1] = nil
		h.idle = h.idle[:n-1]
	}
	t.mu.Unlock()
	for _, s := range stale {
		_ = s.nc.Close()
	}
	if c != nil {
		if !c.quiet() {
			// The server closed it, or sent what nobody asked for (a 408
			// before closing), while it was idle: net/http's reading
			// goroutine would have dropped it; try the next one.
			_ = c.nc.Close()
			return t.conn(ctx, key, h)
		}
		c.written, c.read, c.broken, c.sent = 0, 0, false, false
		return c, true, nil
	}
	addr := key.host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if key.https {
			port = "443"
		}
		addr = net.JoinHostPort(addr, port)
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	if h.tls != nil {
		tc := tls.Client(nc, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, false, err
		}
		nc = tc
	}
	c = &h1Conn{t: t, key: key, h: h, nc: nc, limit: math.MaxInt64}
	c.watch()
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(writerFunc(c.write), 4<<10)
	return c, false, nil
}

// put keeps c for the next request to its host, or closes it when the host
// has as many idle connections as it may keep.
func (t *h1Transport) put(c *h1Conn) {
	if c.br.Buffered() > 0 {
		// Bytes after the reply (a stray CRLF, a second reply): the next
		// request would read them as its own reply.
		_ = c.nc.Close()
		return
	}
	c.idleSince = time.Now()
	t.mu.Lock()
	if len(c.h.idle) < t.maxIdle {
		c.h.idle = append(c.h.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		_ = c.nc.Close()
	}
}

// CloseIdleConnections closes every idle connection, the fallback's too.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	var idle []*h1Conn
	for _, h := range t.hosts {
		idle = append(idle, h.idle...)
		h.idle = nil
	}
	t.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
	t.fallback.CloseIdleConnections()
}

// exchange writes req on c and reads the head of its reply; on an error c is
// closed.
func (t *h1Transport) exchange(ctx context.Context, c *h1Conn, req *http.Request) (*http.Response, error) {
	// The context bounds the exchange through the connection's deadline,
	// set only when the context ends, so a request costs no timer of its
	// own; stop tells, at the end, whether it did.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = c.nc.Close()
		return nil, err
	}
	if err := ctx.Err(); err != nil { // ended before AfterFunc watched it
		return fail(err)
	}
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return fail(err)
	}
	c.sent = true
	var resp *http.Response
	for n1xx := 0; ; n1xx++ {
		c.limit = t.maxHeader
		resp, err = http.ReadResponse(c.br, req)
		if err != nil && c.limit <= 0 {
			err = fmt.Errorf("%w: the gateway sent more than %d bytes of headers", ErrReplyHeadersTooLarge, t.maxHeader)
		}
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n1xx >= max1xxReplies {
			return fail(errors.New("too many 1xx informational replies"))
		}
	}
	c.limit = math.MaxInt64
	b := &h1Body{c: c, stop: stop, ctx: ctx, body: resp.Body,
		reuse: !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	if resp.Body == http.NoBody {
		b.end(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// h1Conn is one connection and what reads and writes it.
type h1Conn struct {
	t         *h1Transport
	key       h1Key
	h         *h1Host
	nc        net.Conn
	br        *bufio.Reader         // reads through Read
	bw        *bufio.Writer         // writes through write
	limit     int64                 // bytes Read may still read: the reply head's bound
	written   int64                 // bytes of the current request on the wire
	read      int64                 // bytes of its reply read
	broken    bool                  // a write failed: the connection's fault, not the request's
	sent      bool                  // the whole request was written
	raw       syscall.RawConn       // its socket, for quiet (nil: not looked at)
	quietFn   func(fd uintptr) bool // c.peek, bound once (h1_quiet_unix.go)
	quietOK   bool                  // peek's answer
	peekBuf   [1]byte
	idleSince time.Time
}

// tlsQuiet reports whether crypto/tls holds nothing from c's peer either:
// the records it read off the socket with the reply's last one (more
// bytes, a close_notify) are past both the socket's peek and put's check
// of the reply buffer. A read that may not wait tells: only its timeout is
// quiet (crypto/tls keeps no error of a timeout, and Peek leaves none in
// the buffer). Over TLS only.
func (c *h1Conn) tlsQuiet() bool {
	if c.nc.SetReadDeadline(time.Unix(1, 0)) != nil {
		return false
	}
	_, err := c.br.Peek(1)
	if c.nc.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	return isTimeout(err)
}

// errHeadLimit ends a reply head past the bound; exchange reports it as
// ErrReplyHeadersTooLarge.
var errHeadLimit = errors.New("reply head bound reached")

func (c *h1Conn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errHeadLimit
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	c.read += int64(n)
	return n, err
}

func (c *h1Conn) write(p []byte) (int, error) {
	n, err := c.nc.Write(p)
	c.written += int64(n)
	c.broken = c.broken || err != nil
	return n, err
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// h1Body is a reply's body: read to its end, it gives its connection back
// for the next request; closed before, it closes the connection.
type h1Body struct {
	c      *h1Conn
	body   io.ReadCloser
	stop   func() bool // ends the context's hold on the connection
	ctx    context.Context
	reuse  bool // neither side asked to close the connection
	ended  atomic.Bool
	closed atomic.Bool // Close was called: reads fail, as net/http's do
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.ended.Load() {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.end(true)
	case err != nil:
		err = ctxErr(b.ctx, err)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.closed.Store(true)
	b.end(false)
	return nil
}

// end ends the request once: the connection goes back to the idle ones
// when the reply was read to its end (complete), the context never ended
// it and neither side asked to close it; otherwise it is closed.
func (b *h1Body) end(complete bool) {
	if !b.ended.CompareAndSwap(false, true) {
		return
	}
	if b.stop() && complete && b.reuse {
		b.c.t.put(b.c)
		return
	}
	_ = b.c.nc.Close()
}

// resendable reports whether a request that the reused connection c
// failed may be sent again on another, by net/http's rule: its body can be
// sent again, and either the connection broke before any of it was
// written, or the whole of it was written, the connection broke before any
// byte of a reply (the server had closed it while it was idle), and the
// request is replayable (an idempotent method, or an Idempotency-Key). A
// request that failed otherwise (a write cut short, its own body's read
// error) is not.
func resendable(req *http.Request, c *h1Conn, err error) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if !c.sent {
		return c.broken && c.written == 0
	}
	if c.read != 0 || isTimeout(err) {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// isTimeout reports whether err is a deadline's: the request's own, never
// a closed connection's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rewound is req with its body from the start again, for a resend.
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := *req
	r.Body = body
	return &r, nil
}

// closeBody closes a request's body that was never written, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// ctxErr is ctx's error once ctx is done (what net/http returns for a
// request its context ended), err otherwise.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}
