package httpgateway

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
)

// A charge asks for no compressed reply: the reply bounds then hold for the
// bytes the gateway sends, and net/http adds no header of its own.
func TestChargeAsksForNoCompression(t *testing.T) {
	t.Parallel()
	var asked atomic.Value
	base := serve(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Store(r.Header.Values("Accept-Encoding"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"charge_id":"ch_1","status":"succeeded"}`))
	})
	c, _ := newClient(t, base, 5*time.Second)
	res, err := c.Charge(t.Context(), chargeReq(t, "ord-1", "cus-1"))
	if err != nil || res.Status != order.ChargeSucceeded {
		t.Fatalf("Charge: %+v, %v", res, err)
	}
	if got, _ := asked.Load().([]string); len(got) != 0 {
		t.Errorf("Accept-Encoding %q, want none", got)
	}
}
