package httpgateway

import (
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/gatewaytest"
)

// TestGatewayContract runs the PaymentGateway and PaymentRecords contract
// on the generic client against the gateway stub.
func TestGatewayContract(t *testing.T) {
	t.Parallel()
	gatewaytest.Run(t, func(t *testing.T) gatewaytest.Harness {
		stub, base := startStub(t, gatewaystub.Options{PageSize: 2})
		const timeout = time.Second
		c, _ := newClient(t, base, timeout)
		return gatewaytest.Harness{Gateway: c, Records: c, Stub: stub, Timeout: timeout}
	})
}
