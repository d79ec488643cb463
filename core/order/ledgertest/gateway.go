package ledgertest

import (
	"context"
	"fmt"
	"sync"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// Gateway is an order.PaymentGateway for the tests that bill against a
// ledger (Mem or the Postgres store): it records every charge request and
// answers it with Answer, or with a charge when Answer is nil. It is safe
// for the goroutines of a completer or a consumer.
type Gateway struct {
	mu    sync.Mutex
	calls []order.ChargeRequest
	// Answer answers the n-th request (n counts from 1); set it before
	// the gateway is shared, SetAnswer after.
	Answer func(n int, req order.ChargeRequest) (order.ChargeResult, error)
}

var _ order.PaymentGateway = (*Gateway)(nil)

// Charge records req and answers it.
func (g *Gateway) Charge(_ context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, req)
	if g.Answer != nil {
		return g.Answer(len(g.calls), req)
	}
	return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: fmt.Sprintf("ch-%d", len(g.calls))}, nil
}

// SetAnswer replaces Answer while the gateway may be in use.
func (g *Gateway) SetAnswer(answer func(n int, req order.ChargeRequest) (order.ChargeResult, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Answer = answer
}

// Keys returns the idempotency keys of the requests so far, in order.
func (g *Gateway) Keys() []uuid.UUID {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]uuid.UUID, len(g.calls))
	for i, c := range g.calls {
		out[i] = c.IdempotencyKey
	}
	return out
}
