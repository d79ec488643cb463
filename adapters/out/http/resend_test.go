package httpgateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
)

// TestResentRequestIsNeverUnsent: net/http sends a request with an
// Idempotency-Key once more on a new connection when a reused keep-alive
// connection fails without an answer. Here the gateway reads the request on
// the reused connection, drops it unanswered and refuses new connections (a
// restart): the resend fails to dial. The request reached the gateway, so
// the error must not say that nothing was sent (order.ChargeEnded): the
// service would release the attempt while the charge may still run there.
func TestResentRequestIsNeverUnsent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int32
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for n := 1; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			received.Add(1)
			if n == 2 {
				_ = ln.Close() // the restart: new connections are refused
				return         // and this one closes unanswered
			}
			body := `{"charge_id":"ch-1","status":"succeeded"}`
			_, _ = fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-served })
	c, _ := newClient(t, "http://"+ln.Addr().String(), 5*time.Second)
	ctx := context.Background()
	if _, err := c.Charge(ctx, chargeReq(t, "ord-1", "cus-1")); err != nil {
		t.Fatalf("first charge: %v", err)
	}
	_, err = c.Charge(ctx, chargeReq(t, "ord-2", "cus-1"))
	if got := received.Load(); got != 2 {
		t.Fatalf("the gateway read %d requests, want 2 (the test's premise)", got)
	}
	if err == nil {
		t.Fatal("second charge: nil error, want the dropped connection's")
	}
	if order.ChargeEnded(err) {
		t.Errorf("second charge: %v is marked as never sent, but the gateway read the request", err)
	}
	if cl := order.Classify(err); cl != order.ClassTransient && cl != order.ClassOutage {
		t.Errorf("second charge: class %v, want transient or outage (no answer)", cl)
	}
}
