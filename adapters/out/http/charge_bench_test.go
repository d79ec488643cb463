package httpgateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// chargedReply is a gateway's reply to a charge, as the stub gateway sends it.
const chargedReply = `{"charge_id":"ch_01JEXAMPLE0000000000000000","status":"succeeded"}`

// BenchmarkCharge is one charge through the Client, as the service makes it
// (metrics and protocol counters on, no tracer), against an in-process
// httptest server over loopback HTTP/1.1 keep-alive: the gateway call
// stage of an event without the network. The server's side of each request
// runs in the same process, so its CPU and allocations are in the figures
// too; they stay the same from one version of the Client to the next.
func BenchmarkCharge(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [512]byte
		for { // the whole body, so that the connection is reused
			if _, err := r.Body.Read(buf[:]); err != nil {
				break
			}
		}
		w.Header()["Content-Type"] = []string{"application/json"}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(chargedReply))
	}))
	b.Cleanup(srv.Close)
	m := metrics.New(prometheus.NewRegistry(), false)
	c, err := NewClient(srv.URL, 5*time.Second, WithMetrics(m.Gateway()), WithIdleConns(64))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.CloseIdleConnections)
	key := uuid.Must(uuid.NewV7())
	req := order.ChargeRequest{IdempotencyKey: key, OrderID: "bench-ord-0000001", CustomerID: "cus-42",
		Amount: order.Money{Amount: 12990, Currency: "EUR"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.Charge(ctx, req)
		if err != nil || res.Status != order.ChargeSucceeded || res.ChargeID == "" {
			b.Fatalf("Charge: %+v, %v", res, err)
		}
	}
}
