package gatewaystub

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StartLean is Start with a minimal HTTP/1.1 server of the stub's own in
// place of net/http's, for benchmarks: the stub stands for a remote gateway,
// and net/http's server costs the machine being measured several times the
// CPU per request. The rules, faults and records are the same.
//
// It reads what an HTTP/1.1 client such as net/http's sends for a charge:
// one request at a time per keep-alive connection, its body sized by
// Content-Length. Anything else (a chunked body, Expect, another protocol
// version, an oversized head or body) gets a 4xx or 5xx and the connection
// is closed. Call it once, instead of Start.
func (s *Stub) StartLean() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln, err := s.listen()
	if err != nil {
		return "", err
	}
	s.lean.start(ln, s.leanConn)
	return "http://" + ln.Addr().String(), nil
}

// leanServer accepts connections and runs one goroutine per connection.
// The zero value is a server not started.
type leanServer struct {
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (l *leanServer) started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ln != nil
}

func (l *leanServer) start(ln net.Listener, serve func(net.Conn)) {
	l.mu.Lock()
	l.ln, l.conns = ln, map[net.Conn]struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				_ = c.Close()
				return
			}
			l.conns[c] = struct{}{}
			l.wg.Add(1)
			l.mu.Unlock()
			go func() {
				defer l.wg.Done()
				serve(c)
				l.mu.Lock()
				delete(l.conns, c)
				l.mu.Unlock()
				_ = c.Close()
			}()
		}
	}()
}

// close stops accepting, closes every connection and waits for their
// goroutines. Requests waiting out their latency end first: Close closes
// the stub's done channel before.
func (l *leanServer) close() {
	l.mu.Lock()
	if l.ln == nil || l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	_ = l.ln.Close()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// leanRequest is the part of a request the stub reads.
type leanRequest struct {
	method, path            string
	key, traceParent, ctype string
	body                    []byte
	close                   bool // Connection: close
}

// errLean is a request the lean server refuses, with the status to say so.
type errLean struct {
	status int
	msg    string
}

func (e *errLean) Error() string { return e.msg }

// maxDiscard is the largest oversized body read away before the 413.
const maxDiscard = 8 << 20

// maxHeadLine bounds a request or header line (the reader's buffer).
const maxHeadLine = 8 << 10

// leanConn serves one connection until the client closes it, a request is
// refused or the stub closes.
func (s *Stub) leanConn(c net.Conn) {
	br := bufio.NewReaderSize(c, maxHeadLine)
	bw := bufio.NewWriterSize(c, 4<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		req, err := readLeanRequest(br)
		if err != nil {
			var el *errLean
			if errors.As(err, &el) {
				writeLean(bw, reply{status: el.status, body: errorBody{Error: "invalid_request", Message: el.msg}}, true)
				_ = bw.Flush()
			}
			return
		}
		rep, reset, call, record := s.answerLean(ctx, req)
		switch {
		case rep.status == 0: // the stub closed while waiting
			return
		case reset:
			call.Replayed = rep.replayed
			s.record(call) // Status 0: nothing was returned
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			return // the caller closes c: an RST, no reply
		}
		if record {
			call.Status, call.Replayed = rep.status, rep.replayed
			s.record(call)
		}
		writeLean(bw, rep, req.close)
		if bw.Flush() != nil || req.close {
			return
		}
	}
}

// answerLean is ServeHTTP for a lean request. record is false for a wrong
// path or method, which ServeHTTP does not record either.
func (s *Stub) answerLean(ctx context.Context, req leanRequest) (rep reply, reset bool, call Call, record bool) {
	if req.path != Path {
		return reply{status: http.StatusNotFound, body: errorBody{Error: "not_found"}}, false, Call{}, false
	}
	if req.method != http.MethodPost {
		return reply{status: http.StatusMethodNotAllowed, body: errorBody{Error: "method_not_allowed"},
			header: map[string]string{"Allow": http.MethodPost}}, false, Call{}, false
	}
	call = Call{Route: "POST " + Path, Key: req.key, TraceParent: req.traceParent, Time: time.Now()}
	body, msg := parseBody(req.ctype, req.body)
	call.OrderID, call.CustomerID, call.Amount, call.Currency = body.OrderID, body.CustomerID, body.Amount, body.Currency
	if msg == "" {
		msg = validate(call.Key, body)
	}
	if msg != "" {
		return invalid(msg), false, call, true
	}
	rep, reset = s.charge(ctx, call, body, nil)
	return rep, reset, call, true
}

// readLeanRequest reads one request. io.EOF (or another read error) ends
// the connection quietly; an *errLean is to be answered first.
func readLeanRequest(br *bufio.Reader) (leanRequest, error) {
	var req leanRequest
	line, err := readLeanLine(br)
	if err != nil {
		return req, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return req, &errLean{http.StatusBadRequest, "malformed request line"}
	}
	if proto != "HTTP/1.1" {
		return req, &errLean{http.StatusHTTPVersionNotSupported, "HTTP/1.1 only"}
	}
	req.method, req.path = method, target
	length := 0
	for {
		h, err := readLeanLine(br)
		if err != nil {
			return req, err
		}
		if h == "" {
			break
		}
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return req, &errLean{http.StatusBadRequest, "malformed header line"}
		}
		value = strings.TrimSpace(value)
		switch {
		case strings.EqualFold(name, "Content-Length"):
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				return req, &errLean{http.StatusBadRequest, "bad Content-Length"}
			}
			length = n
		case strings.EqualFold(name, "Transfer-Encoding"):
			return req, &errLean{http.StatusNotImplemented, "Transfer-Encoding not supported"}
		case strings.EqualFold(name, "Expect"):
			return req, &errLean{http.StatusExpectationFailed, "Expect not supported"}
		case strings.EqualFold(name, "Connection"):
			req.close = strings.EqualFold(value, "close")
		case strings.EqualFold(name, "Content-Type"):
			req.ctype = value
		case strings.EqualFold(name, HeaderIdempotencyKey):
			req.key = value
		case strings.EqualFold(name, HeaderTraceParent):
			req.traceParent = value
		}
	}
	if length > maxBodyBytes {
		// Read it away first, as net/http's server does, so that the client
		// is not reset while still sending and sees the 413.
		if length <= maxDiscard {
			_, _ = io.CopyN(io.Discard, br, int64(length))
		}
		return req, &errLean{http.StatusRequestEntityTooLarge, tooLarge}
	}
	req.body = make([]byte, length)
	if _, err := io.ReadFull(br, req.body); err != nil {
		return req, err
	}
	return req, nil
}

// readLeanLine reads a CRLF- (or LF-) terminated line without its end.
func readLeanLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", &errLean{http.StatusRequestHeaderFieldsTooLarge, "request head line too long"}
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// writeLean writes rep as writeJSON does, with a Content-Length. A
// bufio.Writer keeps its first write error and returns it from Flush, which
// the callers check, so the writes' own errors are not.
func writeLean(bw *bufio.Writer, rep reply, closing bool) {
	body, _ := json.Marshal(rep.body) // plain structs of strings
	body = append(body, '\n')
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", rep.status, http.StatusText(rep.status), len(body))
	for k, v := range rep.header {
		fmt.Fprintf(bw, "%s: %s\r\n", k, v)
	}
	if rep.replayed {
		_, _ = bw.WriteString(HeaderReplayed + ": true\r\n")
	}
	if closing {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	_, _ = bw.Write(body)
}
