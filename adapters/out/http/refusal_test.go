package httpgateway

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
)

// TestChargeRefusalKind (docs/interface.md §6): core tells a 422 (the key was
// used with another body: the invoice stays pending) from every other
// permanent 4xx (refused unexecuted: the invoice becomes rejected).
func TestChargeRefusalKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		want   order.RefusalKind
	}{
		{400, order.RefusalRejected},
		{404, order.RefusalRejected},
		{405, order.RefusalRejected},
		{413, order.RefusalRejected},
		{422, order.RefusalKeyReused},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			t.Parallel()
			base := serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tt.status) })
			c, _ := newClient(t, base, 5*time.Second)
			_, err := c.Charge(context.Background(), chargeReq(t, "ord-1", "cus-1"))
			var refused *order.ChargeRefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("Charge() error = %v, want a *order.ChargeRefusedError", err)
			}
			if refused.Kind != tt.want || refused.StatusCode != tt.status {
				t.Errorf("refusal = kind %d code %d, want kind %d code %d", refused.Kind, refused.StatusCode, tt.want, tt.status)
			}
			if got := order.Classify(err); got != order.ClassPermanent {
				t.Errorf("Classify(%v) = %v, want permanent", err, got)
			}
		})
	}
}
