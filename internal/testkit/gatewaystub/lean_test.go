package gatewaystub

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
)

// TestLeanKeepAlive: a client's keep-alive connection serves every request
// after the first, as with net/http's server.
func TestLeanKeepAlive(t *testing.T) {
	t.Parallel()
	s, base := startOn(t, Options{}, (*Stub).StartLean)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	reused := 0
	for i := range 20 {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) {
				if ci.Reused {
					reused++
				}
			},
		})
		key := "k-" + string(rune('a'+i))
		r, err := post(ctx, c, base, key, body("ord-"+key, "cus-1"), nil)
		if err != nil || r.status != http.StatusCreated {
			t.Fatalf("request %d: %d %v", i, r.status, err)
		}
	}
	if reused != 19 {
		t.Errorf("%d of 19 requests reused the connection", reused)
	}
	if n := len(s.Charges()); n != 20 {
		t.Errorf("%d charges, want 20", n)
	}
}

// TestLeanRefuses: what the lean server does not read is refused with a
// status line, and the connection closed.
func TestLeanRefuses(t *testing.T) {
	t.Parallel()
	_, base := startOn(t, Options{}, (*Stub).StartLean)
	addr := strings.TrimPrefix(base, "http://")
	for _, tc := range []struct{ name, request, status string }{
		{"chunked", "POST /charges HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 501 "},
		{"HTTP/1.0", "POST /charges HTTP/1.0\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 505 "},
		{"expect", "POST /charges HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}", "HTTP/1.1 417 "},
		{"garbage", "hello\r\n\r\n", "HTTP/1.1 400 "},
		{"long line", "POST /" + strings.Repeat("x", maxHeadLine) + " HTTP/1.1\r\n\r\n", "HTTP/1.1 431 "},
		{"bad length", "POST /charges HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 400 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(tc.request)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, tc.status) {
				t.Fatalf("status line %q (%v), want %q…", line, err, tc.status)
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(line+readRest(br))), nil)
			if err != nil {
				t.Fatalf("reply does not parse: %v", err)
			}
			resp.Body.Close()
			if !resp.Close {
				t.Errorf("reply without Connection: close")
			}
		})
	}
}

// readRest reads until the server closes the connection.
func readRest(br *bufio.Reader) string {
	var sb strings.Builder
	_, _ = br.WriteTo(&sb)
	return sb.String()
}
