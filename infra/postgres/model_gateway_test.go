package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// The payment gateway of the model (TestModel): what docs/interface.md §6 lets a
// gateway do, as adversarially as it allows. A request, once sent, is in
// transit until the model lets it reach the gateway; there it executes
// until the model answers it. The gateway
//   - executes a request afresh unless its key has a final answer stored:
//     a success (a charge) or a decline is stored, and replayed to every
//     later request under the key; a 4xx, a 422 or a 503 stores nothing, so
//     a later request under that key executes afresh;
//   - answers 409 in progress (transient, not ended) to a request that
//     arrives while another one under its key executes;
//   - forgets a key's stored answer ttl after it stored it.
//
// Answers reach their caller when the model says; a caller may give up
// first (a timeout or a reset: unmarked transient), or crash, and its
// request still reaches the gateway later, or never. The one bound is the
// gateway's side of the attempt (docs/interface.md §4): a request reaches the
// gateway and executes within modelCutoff of being sent, or not at all.

// gwOutcome is what the gateway does with a request it executes.
type gwOutcome int

const (
	gwSucceeds    gwOutcome = iota // 201: charged; stored under the key
	gwDeclines                     // 402: declined; stored under the key
	gwUnavailable                  // 503: refused unexecuted (marked ended, as the client does); nothing stored
	gwRejects                      // 404: refused unexecuted for good; nothing stored
	gwKeyReused                    // 422: the key was used with another body; nothing stored
	gwLost                         // (only as time passes) never reached the gateway, or died there unexecuted
)

// gwAnswers are the answers the model may give a request that executes,
// each as often as it is listed: 201 and 404 (the answers of a double
// charge) and 503 (which leaves the invoice pending for the other paths)
// more often than the others; the most benign first (rapid shrinks
// towards it).
var gwAnswers = []gwOutcome{gwSucceeds, gwSucceeds, gwRejects, gwRejects, gwUnavailable, gwUnavailable, gwDeclines, gwKeyReused,
	gwSucceeds} // rapid draws the last element more often than the others

// gwFates are what may become of a request whose caller has stopped
// waiting by the time its cutoff passes.
var gwFates = []gwOutcome{gwLost, gwSucceeds, gwDeclines, gwUnavailable, gwRejects, gwKeyReused}

func (o gwOutcome) String() string {
	switch o {
	case gwSucceeds:
		return "201 charged"
	case gwDeclines:
		return "402 declined"
	case gwUnavailable:
		return "503"
	case gwRejects:
		return "404"
	case gwKeyReused:
		return "422"
	case gwLost:
		return "lost"
	}
	return fmt.Sprintf("gwOutcome(%d)", int(o))
}

// reqState is where a request is.
type reqState int

const (
	inTransit reqState = iota // sent, not at the gateway yet
	executing                 // at the gateway: others under its key get 409 in progress
)

// gwRequest is one request sent to the gateway.
type gwRequest struct {
	n       int // in the order sent, from 1
	req     order.ChargeRequest
	call    *call
	sentAt  time.Duration // the model's clock
	state   reqState
	waiting bool         // its caller waits for the answer
	reply   chan gwReply // capacity 1: the model never blocks on it
}

type gwReply struct {
	res order.ChargeResult
	err error
}

// gwKey is what the gateway keeps under one Idempotency-Key.
type gwKey struct {
	stored    *gwReply // the final answer replayed to later requests; nil: none (or forgotten)
	storedAt  time.Duration
	forgotten bool       // an answer stored under the key was forgotten (ttl)
	executing *gwRequest // the request under the key executing now
}

// gwCharge is one charge the gateway made: money moved.
type gwCharge struct {
	id    string
	order string
	key   uuid.UUID
	by    *gwRequest
}

// gatewayModel is order.PaymentGateway. Its state is guarded by the
// model's mutex.
type gatewayModel struct {
	m *model

	now      time.Duration // the model's clock: moved by TimePasses only
	ttl      time.Duration
	keys     map[uuid.UUID]*gwKey
	sent     []*gwRequest       // every request, in the order sent, with the time it was sent
	live     []*gwRequest       // sent, and not finished: in transit or executing
	charges  []gwCharge         // every charge: money moved
	declined map[uuid.UUID]bool // the keys it declined (its records: never forgotten)
}

var _ order.PaymentGateway = (*gatewayModel)(nil)

func newGatewayModel(m *model, ttl time.Duration) *gatewayModel {
	return &gatewayModel{m: m, ttl: ttl, keys: map[uuid.UUID]*gwKey{}, declined: map[uuid.UUID]bool{}}
}

// Charge sends req and waits for the model to answer it (or to give up on
// its behalf). It runs on the caller's goroutine, which the model counts
// as parked from here until it answers; the caller's ctx is not watched:
// the model decides when a caller times out or is cancelled, as part of
// the interleaving.
func (g *gatewayModel) Charge(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	m := g.m
	c := callOf(ctx)
	m.checkSend(c, req)
	r := &gwRequest{req: req, call: c, waiting: true, reply: make(chan gwReply, 1)}
	m.mu.Lock()
	r.n, r.sentAt = len(g.sent)+1, g.now
	g.sent = append(g.sent, r)
	g.live = append(g.live, r)
	c.req = r
	m.notef("%s sends %s (request #%d, at %v)", c.label, m.name(req.IdempotencyKey), r.n, r.sentAt)
	m.parkLocked()
	m.mu.Unlock()
	select {
	case rep := <-r.reply:
		return rep.res, rep.err
	case <-m.abort:
		return order.ChargeResult{}, errModelAborted
	}
}

// keyLocked returns the gateway's state under key.
func (g *gatewayModel) keyLocked(key uuid.UUID) *gwKey {
	k := g.keys[key]
	if k == nil {
		k = &gwKey{}
		g.keys[key] = k
	}
	return k
}

// finishLocked takes r out of the live requests.
func (g *gatewayModel) finishLocked(r *gwRequest) {
	if k := g.keys[r.req.IdempotencyKey]; k != nil && k.executing == r {
		k.executing = nil
	}
	g.live = slices.DeleteFunc(g.live, func(x *gwRequest) bool { return x == r })
}

// arriveLocked: r reaches the gateway. The answer is final at once for a
// key executing another request (409 in progress) or holding a stored
// answer (its replay); otherwise r executes, and the reply is nil.
func (g *gatewayModel) arriveLocked(r *gwRequest) *gwReply {
	k := g.keyLocked(r.req.IdempotencyKey)
	switch {
	case k.executing != nil:
		g.finishLocked(r)
		return &gwReply{err: &order.TransientError{Op: "charge", Err: errors.New("POST /charges: 409: a request with this key is still in progress")}}
	case k.stored != nil:
		g.finishLocked(r)
		rep := *k.stored
		rep.res.Replayed = true
		return &rep
	}
	k.executing = r
	r.state = executing
	return nil
}

// executeLocked ends r, executing, with out, and returns its answer.
func (g *gatewayModel) executeLocked(r *gwRequest, out gwOutcome) gwReply {
	k := g.keyLocked(r.req.IdempotencyKey)
	g.finishLocked(r)
	var rep gwReply
	switch out {
	case gwSucceeds:
		id := fmt.Sprintf("ch-%d", len(g.charges)+1)
		g.charges = append(g.charges, gwCharge{id: id, order: r.req.OrderID, key: r.req.IdempotencyKey, by: r})
		rep.res = order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: id}
	case gwDeclines:
		rep.res = order.ChargeResult{Status: order.ChargeDeclined}
		g.declined[r.req.IdempotencyKey] = true
	case gwUnavailable:
		rep.err = order.MarkChargeEnded(&order.TransientError{Op: "charge", Err: errors.New("POST /charges: 503 Service Unavailable")})
	case gwRejects:
		rep.err = refusal(order.RefusalRejected, http.StatusNotFound)
	case gwKeyReused:
		rep.err = refusal(order.RefusalKeyReused, http.StatusUnprocessableEntity)
	}
	if out == gwSucceeds || out == gwDeclines {
		stored := rep
		k.stored, k.storedAt = &stored, g.now
	}
	return rep
}

// passLocked moves the gateway's clock by d; stored answers older than
// ttl are forgotten.
func (g *gatewayModel) passLocked(d time.Duration) {
	g.now += d
	for _, k := range g.keys {
		if k.stored != nil && g.now-k.storedAt >= g.ttl {
			k.stored, k.forgotten = nil, true
		}
	}
}

// chargesOf returns the charges made for orderID.
func (g *gatewayModel) chargesOfLocked(orderID string) []gwCharge {
	var cs []gwCharge
	for _, c := range g.charges {
		if c.order == orderID {
			cs = append(cs, c)
		}
	}
	return cs
}

// refusal is a permanent refusal as the gateway client returns it.
func refusal(kind order.RefusalKind, status int) error {
	return &order.PermanentError{Op: "charge", Err: &order.ChargeRefusedError{Kind: kind, StatusCode: status,
		Err: fmt.Errorf("POST /charges: %d %s", status, http.StatusText(status))}}
}

// errTimeout is a caller's timeout or a reset: the request may still run
// at the gateway, so it is not marked ended.
var errTimeout = &order.TransientError{Op: "charge", Err: fmt.Errorf("POST /charges: no reply within %v: %w", modelPaymentTimeout, context.DeadlineExceeded)}

// errCrashed is what a crashed caller's Charge returns: the process is
// gone, so nothing it does next reaches Postgres or Kafka anyway.
var errCrashed = fmt.Errorf("charge: POST /charges: no reply: canceled: %w", context.Canceled)

// errModelAborted ends the calls still parked when a check ends early.
var errModelAborted = fmt.Errorf("model aborted: %w", context.Canceled)
