package postgres_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service/completer"
	"github.com/acme/billing/internal/service/relay"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestModel is issue 22's model of every actor: a state-machine property
// test (rapid) that interleaves, on one to three orders, everything that
// can send an order's key to the gateway or move its invoice, against the
// real Store (the fence of docs/interface.md §4 lives in its statements), the
// real BillingService and the real completer (internal/service/completer), and a gateway model
// (model_gateway_test.go) as adversarial as docs/interface.md §6 allows.
//
// The actions (rapid draws among them uniformly; each then draws among
// what can act now):
//   - NewEvent: a brand-new event of an order, from the main topic;
//   - Consumer: a record handled again: routed to a retry tier (the tier
//     retry), left uncommitted by a crash or a rebalance (the partition's
//     next owner), or waiting in place because another path holds the
//     attempt (ClassBusy: it calls Bill again, as its consumer does);
//   - Replay: an earlier event again (a DLQ replay, an offset reset);
//   - CompleterPass: completer.Completer.Pass, everything pending due at
//     once (ResumeAfter 1ns), at most two passes at a time (two pods); its
//     process may die right after its claim;
//   - GatewayAnswers: a request reaches the gateway if it has not yet, and
//     is answered (201, 402, 503, 404 or 422 when it executes; 409 in
//     progress or the replay of a stored answer as the gateway's rules
//     say); its caller may then pause before its settle;
//   - Slowness: a request reaches the gateway and executes there, unanswered
//     (others under its key get 409); a caller gives up (a timeout, a
//     reset) while its request may still reach the gateway; a paused caller
//     settles;
//   - Failure: the process crashes (every call in flight abandoned: its
//     context cancelled, its request still possibly executed by the
//     gateway, its record back uncommitted); a rebalance (a record in
//     flight goes to the partition's next owner uncommitted; its call, if at
//     the gateway or before its settle, goes on without the partition: it
//     still routes, and commits nothing; one waiting in place gives way);
//     Postgres crashes and loses the latest settles, the ones no
//     synchronous commit has made durable since (the settle commits without
//     waiting for its flush);
//   - Person: someone resolves a held invoice (Store.Resolve, billing
//     invoice resolve) from the gateway's own records of its key: charged,
//     declined, or (no money moved) rejected or resumed;
//   - TimePasses: the clocks move (below).
//
// Each call runs on its own goroutine until it returns or waits for the
// model (its request at the gateway, or a paused settle); the model runs
// one action at a time and waits until every call is back to one of those,
// so that a sequence is reproducible and shrinks.
//
// Time is virtual. Postgres's clock is moved by moving the invoices'
// timestamps back by Δ (attempt_until, key_sent_at, updated_at and
// next_resume_at, the completer's back-off), the gateway's by Δ (its key
// ttl). That is preferred to short attempt lives and waits: nothing sleeps,
// the terms are production's (the key ttl, the completer's back-off; the
// payment timeout at a minute so that no real deadline fires in a check),
// and every check is as fast as the database. The real clock moves too, by
// the little a check takes: a request reaches the gateway within
// modelCutoff (30 s) of being sent, or never; its attempt lives 65 s; the
// 35 s between them absorb that. The caller's own deadline is real (asked
// + 62.5 s) and never fires in a check; the model times a waiting caller
// out when the clock passes the cutoff of its request.
//
// Invariants, after every step:
//   - at most one successful charge per order at the gateway;
//   - a key is sent only while its invoice is pending under it with a live
//     attempt (checked at the send, on the database), and reaches the
//     gateway only while its invoice is still pending under it: never after
//     the invoice was settled, rejected, reopened under another key or held
//     (docs/interface.md §4: a gateway that stores nothing for a refusal never
//     sees an old key after a new one);
//   - no key is sent after the gateway has forgotten an answer under it;
//   - the invoices tell the truth: a charged invoice's key was charged at
//     the gateway, a declined or rejected order was not charged at all; an
//     event that reports charged or declined finds its invoice so.
//
// And at the end, after the drain (every request answered 201, attempts
// expired, every record handled until it commits or is dead-lettered,
// completer passes until one claims nothing): every order is charged (once,
// under its invoice's key, with that charge's id), declined or rejected
// (no charge; one the gateway rejected has an event in the DLQ), or held
// (at most one charge): never pending with nothing left to resume it.
//
// The test logs what the checks reached (-v). Run it longer with
// -rapid.checks=2000 (or RAPID_CHECKS=2000), with longer sequences with
// -rapid.steps=60; -rapid.v prints every step.
func TestModel(t *testing.T) {
	t.Parallel()
	env := newModelEnv(t)
	rapid.Check(t, func(t *rapid.T) {
		env.run(t, modelConfig{fence: true, parkEvents: true, promises: true})
	})
	env.logStats(t)
}

// The model's terms: production's defaults (internal/config), but for the
// payment timeout: a minute, so that no real deadline fires in a check.
const (
	modelPaymentTimeout = time.Minute
	modelKeyTTL         = 24 * time.Hour
	// modelCutoff: a request reaches the gateway and executes within this
	// of being sent, or never; a caller still waiting then times out.
	modelCutoff = modelPaymentTimeout / 2
	// modelPassTimeout is real (Pass's context), long enough never to
	// fire, and so the completer's shortest back-off (virtual: it is a
	// minute in production); modelMaxBackoff its longest.
	modelPassTimeout = 10 * time.Minute
	modelMaxBackoff  = 20 * time.Minute
	// modelCheckTimeout bounds one check's database work; quiesceTimeout
	// the wait for the calls of one step.
	modelCheckTimeout = 2 * time.Minute
	quiesceTimeout    = 30 * time.Second
	// drainRounds and drainPasses bound the drain: past them it failed to
	// bring every record and invoice to an end.
	drainRounds = 12
	drainPasses = 6
)

var modelTerms = order.NewAttemptTerms(modelPaymentTimeout, modelKeyTTL)

// modelDeltas are the steps of TimePasses, each as often as it is listed:
// a second; past a request's cutoff but inside its attempt's life; past
// the attempt's life; past the completer's back-off; past half the key's
// ttl (every pending invoice becomes held); past the ttl (the gateway
// forgets). The long ones end most of what is in flight, so they come
// less often.
var modelDeltas = slices.Concat(
	slices.Repeat([]time.Duration{time.Second}, 10),
	slices.Repeat([]time.Duration{modelCutoff + 10*time.Second}, 5),
	[]time.Duration{modelTerms.HoldAfter + time.Minute},
	slices.Repeat([]time.Duration{modelTerms.Life + 5*time.Second}, 5),
	[]time.Duration{modelKeyTTL + time.Minute},
	// rapid draws the last element more often than the others.
	slices.Repeat([]time.Duration{modelPassTimeout + time.Minute}, 3),
)

// oneIn is a draw that is true about once in n+1 (1 drawn; rapid draws
// the ends of a range more often), false when shrunk.
func oneIn(t *rapid.T, n int, label string) bool { return rapid.IntRange(0, n).Draw(t, label) == 1 }

// modelConfig selects what one run of the model does.
type modelConfig struct {
	// fence: the Store as it is; false: noFence.
	fence bool
	// parkEvents: the requests of event paths wait at the gateway for the
	// model like the completer's; false: the gateway answers them at once
	// (with a drawn answer), so that only the completer's requests can be
	// late.
	parkEvents bool
	// promises: check what the fence promises (sends, arrivals, forgotten
	// keys, invoices against charges, the end state) besides the money
	// (at most one charge per order), which is always checked.
	promises bool
	// without names actions left out.
	without []string
	// orders: how many orders the events are for; 0: one to three, drawn.
	orders int
}

// modelEnv is the database of one test: every check of it empties and
// reuses it.
type modelEnv struct {
	pool *pgxpool.Pool
	ctx  context.Context

	mu    sync.Mutex
	stats map[string]int // what the checks reached, summed: logged by logStats
}

func newModelEnv(t *testing.T) *modelEnv {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &modelEnv{pool: pool, ctx: ctx, stats: map[string]int{}}
}

// logStats logs what the checks reached, one line per kind of thing, so
// that a run shows whether the model explored what it claims to.
func (env *modelEnv) logStats(t *testing.T) {
	env.mu.Lock()
	defer env.mu.Unlock()
	keys := slices.Sorted(maps.Keys(env.stats))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-48s %d", k, env.stats[k])
	}
	t.Logf("what the checks reached:%s", b.String())
}

// run is one check: a fresh model, a sequence of actions, the drain, the
// end state.
func (env *modelEnv) run(t *rapid.T, cfg modelConfig) {
	m := newModel(t, env, cfg)
	t.Cleanup(m.stop)
	t.Cleanup(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		env.mu.Lock()
		defer env.mu.Unlock()
		env.stats["checks run"]++
		for k, n := range m.stats {
			env.stats[k] += n
		}
	})
	actions := rapid.StateMachineActions(m)
	for _, name := range cfg.without {
		delete(actions, name)
	}
	t.Repeat(actions)
	m.drain(t)
	m.checkEnd(t)
}

// recState is where a record is.
type recState int

const (
	recQueued   recState = iota // in its topic, to be handled
	recInFlight                 // a call handles it
	recWaiting                  // its consumer waits in place for another path's attempt
	recDone                     // committed: final, or routed to a tier
	recDLQ                      // dead-lettered (a copy in the DLQ)
)

// modelEvent is one OrderConfirmed event.
type modelEvent struct {
	name string // o1.e2: the second event of o1
	evt  order.OrderConfirmedEvent
}

// record is one Kafka record of an event: in the main topic, a retry tier
// or the DLQ.
type record struct {
	ev     *modelEvent
	tier   int  // 0: main topic, n: retry tier n
	replay bool // a replay of the event, into the main topic
	again  bool // left uncommitted, to be handled by the partition's next owner
	state  recState
	call   *call
	looks  int // Bill calls that found the attempt busy (Decide's attempt)
}

func (r *record) label() string {
	where := "main"
	switch {
	case r.tier > 0:
		where = fmt.Sprintf("tier%d", r.tier)
	case r.replay:
		where = "replay"
	}
	return r.ev.name + "@" + where
}

// call is one Bill (of a record) or one completer pass (rec nil), on its
// own goroutine. The fields from zombie on are shared by that goroutine
// and the model, under model.mu (out, err and res are the goroutine's until
// done).
type call struct {
	label          string
	rec            *record
	ctx            context.Context
	cancel         context.CancelFunc
	diesAfterClaim bool // a completer pass whose process dies right after its claim

	zombie  bool // its record went to the partition's next owner: it routes, never commits
	crashed bool // its process died: nothing it returns is acted on
	req     *gwRequest
	settle  chan bool // waiting before a settle: true goes on, false gives up (crashed)
	pause   bool      // its next settle waits until the model lets it go on (Slowness)
	done    bool
	reaped  bool
	out     order.Outcome
	err     error
	res     completer.Result
}

type callKey struct{}

// callOf is the call ctx belongs to (nil outside the model's calls).
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// model is the state machine: the actors' actions are its exported
// methods (rapid.StateMachineActions), Check its invariants.
type model struct {
	cfg       modelConfig
	pool      *pgxpool.Pool
	store     *postgres.Store
	ctx       context.Context
	cancel    context.CancelFunc
	svc       *order.BillingService
	completer *completer.Completer
	policy    order.RetryPolicy
	gw        *gatewayModel
	orders    []string
	events    []*modelEvent
	records   []*record
	passes    int
	healthy   bool // draining: the gateway answers every request at once, 201 or as its rules say

	wg       sync.WaitGroup
	abort    chan struct{}
	stopOnce sync.Once
	idle     chan struct{}

	mu         sync.Mutex
	running    int // calls on their goroutines, not waiting for the model
	calls      []*call
	names      map[uuid.UUID]string
	notes      []string
	violations []string
	async      []lostSettle           // settles not yet durable, oldest first
	stats      map[string]int         // what this check reached (modelEnv.stats)
	keys       map[string][]uuid.UUID // order → the keys its invoice was opened or reopened under
}

func newModel(t *rapid.T, env *modelEnv, cfg modelConfig) *model {
	ctx, cancel := context.WithTimeout(env.ctx, modelCheckTimeout)
	m := &model{cfg: cfg, pool: env.pool, ctx: ctx, cancel: cancel,
		abort: make(chan struct{}), idle: make(chan struct{}, 1), names: map[uuid.UUID]string{},
		stats: map[string]int{}, keys: map[string][]uuid.UUID{}}
	for _, q := range []string{`DELETE FROM invoice`, `DELETE FROM processed_event`, `DELETE FROM invoice_outbox`} {
		if _, err := env.pool.Exec(ctx, q); err != nil {
			cancel()
			t.Fatalf("empty the database: %v", err)
		}
	}
	n := cfg.orders
	if n == 0 {
		n = rapid.IntRange(1, 3).Draw(t, "orders")
	}
	for i := range n {
		m.orders = append(m.orders, fmt.Sprintf("o%d", i+1))
	}
	// Every transition writes its invoice event (docs/interface.md §9): checkEnd
	// publishes them and checks one event id per transition.
	store := postgres.NewStore(env.pool, postgres.WithEvents(true))
	m.store = store
	var inner modelStore = store
	if !cfg.fence {
		inner = newNoFence(store, env.pool)
	}
	ledger := &modelLedger{inner: inner, m: m}
	m.gw = newGatewayModel(m, modelKeyTTL)
	m.svc = order.NewBillingService(ledger, m.gw, group, order.WithAttemptTerms(modelTerms))
	m.completer = completer.New(ledger, m.svc, completer.Options{
		ResumeAfter: time.Nanosecond, PassTimeout: modelPassTimeout, MaxBackoff: modelMaxBackoff})
	// Two tiers; their delays are not modelled (a tier may run at once).
	m.policy = order.NewRetryPolicy(time.Second, time.Second)
	return m
}

// stop ends a check: whatever still waits for the model is let go, and its
// goroutine waited for.
func (m *model) stop() {
	m.stopOnce.Do(func() {
		close(m.abort)
		m.mu.Lock()
		for _, c := range m.calls {
			c.cancel()
		}
		m.mu.Unlock()
		m.wg.Wait()
		m.cancel()
	})
}

// ---- running calls ----

// parkLocked: the calling goroutine stops running (it waits for the model,
// or has returned).
func (m *model) parkLocked() {
	m.running--
	if m.running == 0 {
		select {
		case m.idle <- struct{}{}:
		default:
		}
	}
}

// start runs fn as call c on a goroutine of its own.
func (m *model) start(c *call, fn func(ctx context.Context)) {
	m.mu.Lock()
	m.running++
	m.calls = append(m.calls, c)
	m.mu.Unlock()
	m.wg.Go(func() {
		fn(c.ctx)
		m.mu.Lock()
		c.done = true
		m.parkLocked()
		m.mu.Unlock()
	})
}

func (m *model) newCall(label string, rec *record) *call {
	c := &call{label: label, rec: rec}
	c.ctx, c.cancel = context.WithCancel(context.WithValue(m.ctx, callKey{}, c))
	return c
}

// quiesce waits until every call has returned or waits for the model, then
// acts on what returned.
func (m *model) quiesce(t *rapid.T) {
	timeout := time.NewTimer(quiesceTimeout)
	defer timeout.Stop()
	for {
		m.mu.Lock()
		n := m.running
		m.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-m.idle:
		case <-timeout.C:
			t.Fatalf("%d calls still running after %v: one blocked outside the gateway and the settle", n, quiesceTimeout)
		}
	}
	m.flushNotes(t)
	m.reap(t)
}

// settleDown quiesces, then answers at once what the configuration does
// not leave waiting (the drain's gateway; event paths' requests with
// parkEvents off), until nothing is left to answer.
func (m *model) settleDown(t *rapid.T) {
	for {
		m.quiesce(t)
		m.mu.Lock()
		var r *gwRequest
		for _, x := range m.gw.live {
			if m.healthy || (!m.cfg.parkEvents && x.call.rec != nil) {
				r = x
				break
			}
		}
		var paused *call
		if m.healthy {
			for _, c := range m.calls {
				if c.settle != nil {
					paused = c
					break
				}
			}
		}
		m.mu.Unlock()
		switch {
		case r != nil:
			out := gwSucceeds
			if !m.healthy {
				out = drawAnswer(t)
			}
			m.answer(t, r, out, true)
		case paused != nil:
			m.goOn(paused)
		default:
			return
		}
	}
}

// reap acts on the calls that returned: the consumer's handling of a
// Bill's result (RetryPolicy.Decide), or the completer's result.
func (m *model) reap(t *rapid.T) {
	m.mu.Lock()
	var done []*call
	for _, c := range m.calls {
		if c.done && !c.reaped {
			c.reaped = true
			done = append(done, c)
		}
	}
	m.mu.Unlock()
	for _, c := range done {
		if c.rec == nil {
			m.logf(t, "%s ends: %+v, %v", c.label, c.res, c.err)
			m.count("completer pass")
			for what, n := range map[string]int{"claimed": c.res.Claimed, "charged": c.res.Outcomes[order.OutcomeCharged],
				"declined": c.res.Outcomes[order.OutcomeDeclined], "failed": c.res.Failed, "held": c.res.Held, "skipped": c.res.Skipped} {
				m.mu.Lock()
				m.stats["completer: "+what] += n
				m.mu.Unlock()
			}
			continue
		}
		m.route(t, c)
	}
}

// route does with a record what its consumer does with Bill's result.
func (m *model) route(t *rapid.T, c *call) {
	rec := c.rec
	if c.err == nil {
		m.logf(t, "%s: %s", c.label, c.out)
	} else {
		m.logf(t, "%s: %v", c.label, c.err)
	}
	d := m.policy.Decide(c.err, rec.tier, rec.looks)
	switch {
	case c.err == nil:
		m.count("event: " + string(c.out))
	case errors.As(c.err, new(*order.HeldError)):
		m.count("event: held (" + d.Action.String() + ")")
	default:
		m.count("event: " + d.Class.String() + " (" + d.Action.String() + ")")
	}
	switch {
	case c.crashed:
		if !c.zombie {
			rec.state, rec.again, rec.call = recQueued, true, nil
		}
		return
	case c.zombie:
		// Its handler lost the partition: it still writes to a tier or the
		// DLQ, and commits nothing.
		switch {
		case c.err != nil && d.Action == order.ActionRetryTier:
			m.count("zombie routes to a tier")
			m.addRecord(rec.ev, d.Tier, false, recQueued)
		case c.err != nil && d.Action == order.ActionDeadLetter:
			m.addRecord(rec.ev, rec.tier, rec.replay, recDLQ)
		}
		return
	}
	rec.call = nil
	if c.err == nil {
		if m.cfg.promises && (c.out == order.OutcomeCharged || c.out == order.OutcomeDeclined) {
			// What the event reports is what its settle wrote.
			status, key, _, err := m.invoiceState(rec.ev.evt.OrderID)
			if want := order.InvoiceStatus(c.out); err != nil || status != want {
				t.Fatalf("%s reports %s, its invoice is %s under %s (%v)", c.label, c.out, status, m.name(key), err)
			}
		}
		rec.state = recDone
		return
	}
	switch d.Action {
	case order.ActionWait:
		rec.state = recWaiting
		rec.looks++
	case order.ActionRetryTier:
		rec.state = recDone
		m.addRecord(rec.ev, d.Tier, false, recQueued)
	case order.ActionDeadLetter:
		rec.state = recDLQ
	default:
		// No dependency fails in the model, and only a crash cancels.
		t.Fatalf("%s: unexpected %s (%s): %v", c.label, d.Action, d.Class, m.named(c.err.Error()))
	}
}

// ---- records and events ----

func (m *model) addRecord(ev *modelEvent, tier int, replay bool, state recState) *record {
	rec := &record{ev: ev, tier: tier, replay: replay, state: state}
	m.records = append(m.records, rec)
	return rec
}

func (m *model) newEvent(t *rapid.T, orderID string) *modelEvent {
	n := 1
	for _, ev := range m.events {
		if ev.evt.OrderID == orderID {
			n++
		}
	}
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: orderID, CustomerID: "cus-" + orderID,
		TotalAmount: 1000 + int64(n), Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	ev := &modelEvent{name: fmt.Sprintf("%s.e%d", orderID, n), evt: evt}
	m.events = append(m.events, ev)
	m.mu.Lock()
	m.names[evt.EventID] = ev.name
	m.mu.Unlock()
	return ev
}

// deliver has rec's consumer call Bill for it.
func (m *model) deliver(t *rapid.T, rec *record) {
	label := rec.label()
	if rec.again {
		label += " (again)"
	}
	c := m.newCall(label, rec)
	rec.state, rec.again, rec.call = recInFlight, false, c
	m.logf(t, "%s: Bill", label)
	m.start(c, func(ctx context.Context) { c.out, c.err = m.svc.Bill(ctx, rec.ev.evt) })
	m.settleDown(t)
}

// pickRecord draws one of the records ok accepts; none: the action does
// not apply.
func (m *model) pickRecord(t *rapid.T, what string, ok func(*record) bool) *record {
	var recs []*record
	for _, r := range m.records {
		if ok(r) {
			recs = append(recs, r)
		}
	}
	if len(recs) == 0 {
		t.SkipNow()
	}
	return recs[rapid.IntRange(0, len(recs)-1).Draw(t, what)]
}

// ---- the actors ----
//
// rapid.T.Repeat draws the next action uniformly among these methods, so
// each is a group of actors of about equal weight; within a group a second
// draw picks among those that can act now. An action that cannot act skips
// (rapid draws another).

// NewEvent: a brand-new event of an order, from the main topic.
func (m *model) NewEvent(t *rapid.T) {
	orderID := rapid.SampledFrom(m.orders).Draw(t, "order")
	m.deliver(t, m.addRecord(m.newEvent(t, orderID), 0, false, recQueued))
}

// Consumer: a consumer handles a record again: one routed to a retry tier
// (a tier retry), one left uncommitted by a crash or a rebalance (the
// partition's next owner), or one waiting in place for another path's
// attempt (it looks again: the consumer's ActionWait).
func (m *model) Consumer(t *rapid.T) {
	m.deliver(t, m.pickRecord(t, "record", func(r *record) bool { return r.state == recQueued || r.state == recWaiting }))
}

// Replay: an earlier event again, into the main topic: a DLQ replay, or an
// operator's offset reset.
func (m *model) Replay(t *rapid.T) {
	if len(m.events) == 0 {
		t.SkipNow()
	}
	ev := m.events[rapid.IntRange(0, len(m.events)-1).Draw(t, "event")]
	m.deliver(t, m.addRecord(ev, 0, true, recQueued))
}

// CompleterPass: a pending completer pass (one of at most two at a time:
// two pods). Its process may die right after its claim committed.
func (m *model) CompleterPass(t *rapid.T) {
	m.mu.Lock()
	inFlight := 0
	for _, c := range m.calls {
		if c.rec == nil && !c.done {
			inFlight++
		}
	}
	m.mu.Unlock()
	if inFlight >= 2 {
		t.SkipNow()
	}
	m.runPass(t, oneIn(t, 4, "dies after its claim (1: yes)"))
}

func (m *model) runPass(t *rapid.T, dies bool) *call {
	m.passes++
	c := m.newCall(fmt.Sprintf("completer#%d", m.passes), nil)
	c.diesAfterClaim = dies
	m.logf(t, "%s: Pass", c.label)
	m.start(c, func(ctx context.Context) { c.res, c.err = m.completer.Pass(ctx) })
	m.settleDown(t)
	return c
}

// GatewayAnswers: a request reaches the gateway if it has not yet, and is
// answered: as the gateway's rules say (409 in progress, a replay), or
// with a drawn answer when it executes. Its caller, if still waiting, gets
// the answer, and may pause before its settle.
func (m *model) GatewayAnswers(t *rapid.T) {
	r := m.pickRequest(t, func(*gwRequest) bool { return true })
	m.answer(t, r, drawAnswer(t), true)
	m.settleDown(t)
}

// pickRequest draws one of the live requests ok accepts.
func (m *model) pickRequest(t *rapid.T, ok func(*gwRequest) bool) *gwRequest {
	m.mu.Lock()
	var rs []*gwRequest
	for _, r := range m.gw.live {
		if ok(r) {
			rs = append(rs, r)
		}
	}
	m.mu.Unlock()
	if len(rs) == 0 {
		t.SkipNow()
	}
	return rs[rapid.IntRange(0, len(rs)-1).Draw(t, "request")]
}

// drawAnswer draws what the gateway does with a request it executes: 201
// and 404 (the answers of a double charge) more often than the others.
func drawAnswer(t *rapid.T) gwOutcome {
	return rapid.SampledFrom(gwAnswers).Draw(t, "answer")
}

// Slowness: something takes its time. A request in transit reaches the
// gateway and executes there, without an answer yet (later requests under
// its key get 409 in progress); a caller stops waiting for its request (a
// timeout, a reset: transient, not ended), which may still reach the
// gateway; a caller paused before its settle settles.
func (m *model) Slowness(t *rapid.T) {
	m.mu.Lock()
	var kinds []string
	if slices.ContainsFunc(m.gw.live, func(r *gwRequest) bool { return r.state == inTransit }) {
		kinds = append(kinds, "request reaches the gateway")
	}
	if slices.ContainsFunc(m.gw.live, func(r *gwRequest) bool { return r.waiting }) {
		kinds = append(kinds, "caller gives up")
	}
	if slices.ContainsFunc(m.calls, func(c *call) bool { return c.settle != nil }) {
		kinds = append(kinds, "settle goes on")
	}
	m.mu.Unlock()
	if len(kinds) == 0 {
		t.SkipNow()
	}
	switch rapid.SampledFrom(kinds).Draw(t, "slowness") {
	case "request reaches the gateway":
		m.arrive(t, m.pickRequest(t, func(r *gwRequest) bool { return r.state == inTransit }), true)
	case "caller gives up":
		r := m.pickRequest(t, func(r *gwRequest) bool { return r.waiting })
		m.mu.Lock()
		m.notef("%s gives up on request #%d", r.call.label, r.n)
		m.countLocked("gateway: caller gives up")
		m.replyLocked(r, gwReply{err: errTimeout})
		m.mu.Unlock()
	default:
		m.mu.Lock()
		var paused []*call
		for _, c := range m.calls {
			if c.settle != nil {
				paused = append(paused, c)
			}
		}
		m.mu.Unlock()
		m.goOn(paused[rapid.IntRange(0, len(paused)-1).Draw(t, "paused call")])
	}
	m.settleDown(t)
}

// Failure: the process crashes; a rebalance; Postgres crashes and loses
// settles.
func (m *model) Failure(t *rapid.T) {
	m.mu.Lock()
	var kinds []string
	if slices.ContainsFunc(m.calls, func(c *call) bool { return !c.done && !c.crashed }) ||
		slices.ContainsFunc(m.records, func(r *record) bool { return r.state == recWaiting }) {
		kinds = append(kinds, "crash", "rebalance")
	}
	if len(m.async) > 0 {
		kinds = append(kinds, "lost settle")
	}
	m.mu.Unlock()
	if len(kinds) == 0 {
		t.SkipNow()
	}
	switch rapid.SampledFrom(kinds).Draw(t, "failure") {
	case "crash":
		m.crash(t)
	case "rebalance":
		m.rebalance(t)
	default:
		m.loseSettle(t)
	}
}

// crash: the process dies. Every call in flight is abandoned (its context
// cancelled; its request, if sent, may still reach the gateway); every
// record in flight or waiting comes back uncommitted.
func (m *model) crash(t *rapid.T) {
	m.mu.Lock()
	m.notef("the process crashes")
	m.countLocked("failure: crash")
	victims := slices.DeleteFunc(slices.Clone(m.calls), func(c *call) bool { return c.done || c.crashed })
	for _, c := range victims {
		c.crashed = true
	}
	for _, r := range m.records {
		if r.state == recWaiting {
			r.state, r.again = recQueued, true
		}
	}
	m.mu.Unlock()
	// One at a time, so that the order they end in is the same at every
	// run of the sequence.
	for _, c := range victims {
		c.cancel()
		m.mu.Lock()
		switch {
		case c.req != nil:
			m.replyLocked(c.req, gwReply{err: errCrashed})
		case c.settle != nil:
			m.running++
			c.settle <- false
			c.settle = nil
		}
		m.mu.Unlock()
		m.quiesce(t)
	}
	m.settleDown(t)
}

// rebalance: a record in flight goes to the partition's next owner,
// uncommitted. Waiting in place, it gives way; at the gateway or before its
// settle, its call goes on without its partition.
func (m *model) rebalance(t *rapid.T) {
	rec := m.pickRecord(t, "record in flight", func(r *record) bool {
		return r.state == recWaiting || (r.state == recInFlight && !r.call.zombie)
	})
	m.count("failure: rebalance")
	if rec.state == recInFlight {
		m.mu.Lock()
		rec.call.zombie = true
		m.mu.Unlock()
		m.logf(t, "rebalance: %s goes on without its partition", rec.call.label)
	} else {
		m.logf(t, "rebalance: %s gives way", rec.label())
	}
	rec.state, rec.again, rec.call = recQueued, true, nil
}

// loseSettle: Postgres crashes and loses the latest settles that no
// synchronous commit has made durable since (a suffix of them: the WAL is
// written in order).
func (m *model) loseSettle(t *rapid.T) {
	m.mu.Lock()
	async := slices.Clone(m.async)
	m.mu.Unlock()
	n := rapid.IntRange(1, len(async)).Draw(t, "settles lost")
	lost := async[len(async)-n:]
	for i := len(lost) - 1; i >= 0; i-- {
		if err := restoreRow(m.ctx, m.pool, lost[i]); err != nil {
			t.Fatalf("lose the settle of %s: %v", lost[i].orderID, err)
		}
		m.logf(t, "Postgres crashes: the settle of %s is lost", lost[i].orderID)
		m.count("failure: settle lost")
	}
	m.mu.Lock()
	m.async = nil // what survived the crash is durable
	m.mu.Unlock()
}

// Person: someone decides on a held invoice (billing invoice resolve),
// from the gateway's own records of its key: charged, with the charge made
// under it; declined, if the gateway declined it; otherwise (no money moved
// under it) rejected, or resumed while its key is young enough.
func (m *model) Person(t *rapid.T) {
	var held []order.Invoice
	for _, inv := range m.invoices(t) {
		if inv.Status == order.StatusHeld {
			held = append(held, inv)
		}
	}
	if len(held) == 0 {
		t.SkipNow()
	}
	inv := held[rapid.IntRange(0, len(held)-1).Draw(t, "held invoice")]
	m.mu.Lock()
	i := slices.IndexFunc(m.gw.charges, func(c gwCharge) bool { return c.key == inv.EventID })
	d := order.Resolution{Status: order.StatusRejected}
	switch {
	case i >= 0:
		d = order.Resolution{Status: order.StatusCharged, ChargeID: m.gw.charges[i].id}
	case m.gw.declined[inv.EventID]:
		d.Status = order.StatusDeclined
	}
	m.mu.Unlock()
	if d.Status == order.StatusRejected && oneIn(t, 1, "resume (1: yes)") {
		d.Status = order.StatusPending
	}
	d.Key, d.By = inv.EventID, "model"
	_, _, err := m.store.Resolve(m.ctx, inv.OrderID, d, modelTerms.HoldAfter)
	if errors.Is(err, order.ErrKeyTooOld) {
		m.logf(t, "a person resumes %s: %v", inv.OrderID, err)
		d.Status = order.StatusRejected
		_, _, err = m.store.Resolve(m.ctx, inv.OrderID, d, modelTerms.HoldAfter)
	}
	if err != nil {
		t.Fatalf("a person resolves %s as %s: %v", inv.OrderID, d.Status, err)
	}
	m.flushed(nil)
	m.count("person: " + string(d.Status))
	m.logf(t, "a person resolves %s (held under %s): %s %s", inv.OrderID, m.name(inv.EventID), d.Status, d.ChargeID)
}

// TimePasses: the clocks move by a drawn step.
func (m *model) TimePasses(t *rapid.T) {
	m.passTime(t, rapid.SampledFrom(modelDeltas).Draw(t, "by"), true)
	m.settleDown(t)
}

// ---- the gateway's side ----

// arrive: r reaches the gateway (model_gateway_test.go); an answer the
// gateway gives at once goes to its caller if deliver. It reports whether r
// was answered.
func (m *model) arrive(t *rapid.T, r *gwRequest, deliver bool) bool {
	m.checkArrival(r)
	m.mu.Lock()
	defer m.mu.Unlock()
	rep := m.gw.arriveLocked(r)
	switch {
	case rep == nil:
		m.notef("request #%d (%s) reaches the gateway", r.n, m.name(r.req.IdempotencyKey))
		return false
	case rep.err != nil:
		m.notef("request #%d (%s) reaches the gateway: 409 in progress", r.n, m.name(r.req.IdempotencyKey))
		m.countLocked("gateway: 409 in progress")
	default:
		m.notef("request #%d (%s) reaches the gateway: replayed %v %s", r.n, m.name(r.req.IdempotencyKey), rep.res.Status, rep.res.ChargeID)
		m.countLocked("gateway: replayed")
	}
	if deliver {
		m.replyLocked(r, *rep)
	}
	return true
}

// answer: r reaches the gateway if it has not yet, and if it executes, ends
// with out; the answer goes to its caller if deliver.
func (m *model) answer(t *rapid.T, r *gwRequest, out gwOutcome, deliver bool) {
	if r.state == inTransit && m.arrive(t, r, deliver) {
		return
	}
	pause := false
	if deliver && r.waiting && !m.healthy && (m.cfg.parkEvents || r.call.rec == nil) &&
		out != gwUnavailable {
		pause = oneIn(t, 2, "caller pauses before its settle (1: yes)")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rep := m.gw.executeLocked(r, out)
	m.notef("request #%d (%s) executes: %s", r.n, m.name(r.req.IdempotencyKey), out)
	m.countLocked("gateway: executes " + out.String())
	if !r.waiting {
		m.countLocked("gateway: executes, its caller gone")
	}
	if deliver {
		r.call.pause = pause
		m.replyLocked(r, rep)
	}
}

// replyLocked hands rep to r's caller, if it still waits.
func (m *model) replyLocked(r *gwRequest, rep gwReply) {
	if !r.waiting {
		return
	}
	r.waiting = false
	r.call.req = nil
	m.running++
	r.reply <- rep
}

// waitBeforeSettle runs on c's goroutine before each of its settles: it
// waits there if the model said so, and reports whether to settle (false:
// the process crashed meanwhile).
func (m *model) waitBeforeSettle(c *call) bool {
	m.mu.Lock()
	if c.crashed {
		m.mu.Unlock()
		return false
	}
	if !c.pause {
		m.mu.Unlock()
		return true
	}
	c.pause = false
	ch := make(chan bool, 1)
	c.settle = ch
	m.notef("%s pauses before its settle", c.label)
	m.countLocked("settle paused")
	m.parkLocked()
	m.mu.Unlock()
	select {
	case goOn := <-ch:
		return goOn
	case <-m.abort:
		return false
	}
}

// goOn lets a call paused before its settle settle.
func (m *model) goOn(c *call) {
	m.mu.Lock()
	ch := c.settle
	c.settle = nil
	m.running++
	m.notef("%s settles", c.label)
	m.mu.Unlock()
	ch <- true
}

// passTime moves every clock by d. A request whose cutoff falls within
// reaches the gateway and executes before the clocks move, or is lost
// (draw: what becomes of it is drawn; else it is lost); its caller, if
// still waiting, times out. Postgres's clock moves by moving the invoices'
// timestamps back. The WAL writer has flushed every settle by then.
func (m *model) passTime(t *rapid.T, d time.Duration, draw bool) {
	m.mu.Lock()
	var due []*gwRequest
	for _, r := range m.gw.live {
		if r.sentAt+modelCutoff <= m.gw.now+d {
			due = append(due, r)
		}
	}
	m.mu.Unlock()
	for _, r := range due {
		fate := gwLost
		if draw {
			fate = rapid.SampledFrom(gwFates).Draw(t, fmt.Sprintf("fate of request #%d", r.n))
		}
		if fate != gwLost {
			m.answer(t, r, fate, false)
			continue
		}
		m.mu.Lock()
		m.gw.finishLocked(r)
		m.notef("request #%d (%s) is lost", r.n, m.name(r.req.IdempotencyKey))
		m.countLocked("gateway: request lost")
		m.mu.Unlock()
	}
	if _, err := m.pool.Exec(m.ctx, `UPDATE invoice SET attempt_until = attempt_until - make_interval(secs => $1),
		key_sent_at = key_sent_at - make_interval(secs => $1), updated_at = updated_at - make_interval(secs => $1),
		next_resume_at = next_resume_at - make_interval(secs => $1)`, d.Seconds()); err != nil {
		t.Fatalf("move Postgres's clock: %v", err)
	}
	m.mu.Lock()
	m.gw.passLocked(d)
	m.async = nil
	m.notef("%v pass", d)
	m.countLocked(fmt.Sprintf("time passes %v", d))
	m.mu.Unlock()
	for _, r := range due {
		m.mu.Lock()
		if r.waiting {
			m.notef("%s times out on request #%d", r.call.label, r.n)
			m.replyLocked(r, gwReply{err: errTimeout})
		}
		m.mu.Unlock()
		m.quiesce(t) // one at a time, as in crash
	}
}

// flushed notes a synchronous commit: every settle before it is durable.
// (Conservative: a transaction that wrote nothing flushes nothing, and
// counts here all the same.)
func (m *model) flushed(err error) {
	if err != nil {
		return
	}
	m.mu.Lock()
	m.async = nil
	m.mu.Unlock()
}

// ---- invariants ----

// keyHistory records that orderID's invoice was reopened under key, and
// says which key that is: the one it was rejected under, an earlier one of
// the order (a replay of an earlier event), or a new one.
func (m *model) keyHistory(orderID string, key uuid.UUID) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := m.keys[orderID]
	defer func() { m.keys[orderID] = append(keys, key) }()
	switch {
	case len(keys) > 0 && keys[len(keys)-1] == key:
		return "the key it was rejected under"
	case slices.Contains(keys, key):
		return "an earlier key of the order"
	}
	return "a new key"
}

// countLocked counts one more of what; m.mu is held.
func (m *model) countLocked(what string) { m.stats[what]++ }

func (m *model) count(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countLocked(what)
}

// violate records a broken promise seen on a call's goroutine; Check
// reports it.
func (m *model) violate(format string, args ...any) {
	m.mu.Lock()
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
	m.mu.Unlock()
}

// checkSend, at a send (on the caller's goroutine): the invoice is pending
// under the key, with a live attempt; the gateway has not forgotten an
// answer under the key.
func (m *model) checkSend(c *call, req order.ChargeRequest) {
	if !m.cfg.promises {
		return
	}
	m.checkForgotten(c.label+" sends", req)
	status, key, alive, err := m.invoiceState(req.OrderID)
	switch {
	case err != nil:
		m.violate("%s sends %s: read the invoice: %v", c.label, m.name(req.IdempotencyKey), err)
	case status != order.StatusPending || key != req.IdempotencyKey || !alive:
		m.violate("%s sends %s while the invoice of %s is %s under %s, attempt alive %v",
			c.label, m.name(req.IdempotencyKey), req.OrderID, status, m.name(key), alive)
	}
}

// checkArrival, as r reaches the gateway: its invoice is still pending
// under its key.
func (m *model) checkArrival(r *gwRequest) {
	if !m.cfg.promises {
		return
	}
	req := r.req
	m.checkForgotten(fmt.Sprintf("request #%d reaches the gateway", r.n), req)
	status, key, _, err := m.invoiceState(req.OrderID)
	switch {
	case err != nil:
		m.violate("request #%d reaches the gateway: read the invoice: %v", r.n, err)
	case status != order.StatusPending || key != req.IdempotencyKey:
		m.violate("request #%d (%s, from %s) reaches the gateway after the invoice of %s left pending under it: %s under %s",
			r.n, m.name(req.IdempotencyKey), r.call.label, req.OrderID, status, m.name(key))
	}
}

func (m *model) checkForgotten(what string, req order.ChargeRequest) {
	m.mu.Lock()
	k := m.gw.keys[req.IdempotencyKey]
	forgotten := k != nil && k.forgotten
	m.mu.Unlock()
	if forgotten {
		m.violate("%s: %s, whose answer the gateway has forgotten (ttl)", what, m.name(req.IdempotencyKey))
	}
}

// invoiceState reads an order's invoice: status, key, and whether an
// attempt is alive.
func (m *model) invoiceState(orderID string) (order.InvoiceStatus, uuid.UUID, bool, error) {
	var (
		status string
		key    uuid.UUID
		alive  bool
	)
	err := m.pool.QueryRow(m.ctx, `SELECT status, event_id, coalesce(attempt_until > now(), false) FROM invoice WHERE order_id = $1`,
		orderID).Scan(&status, &key, &alive)
	return order.InvoiceStatus(status), key, alive, err
}

// Check runs after every action.
func (m *model) Check(t *rapid.T) {
	m.mu.Lock()
	violations := slices.Clone(m.violations)
	charges := map[string][]gwCharge{}
	for _, o := range m.orders {
		charges[o] = m.gw.chargesOfLocked(o)
	}
	m.mu.Unlock()
	for _, o := range m.orders {
		if cs := charges[o]; len(cs) > 1 {
			t.Fatalf("order %s charged %d times at the gateway: %s", o, len(cs), m.describeCharges(cs))
		}
	}
	if !m.cfg.promises {
		return
	}
	if len(violations) > 0 {
		t.Fatalf("%s", violations[0])
	}
	for _, inv := range m.invoices(t) {
		cs := charges[inv.OrderID]
		switch inv.Status {
		case order.StatusCharged:
			if len(cs) != 1 || cs[0].key != inv.EventID || (inv.ChargeID != "" && inv.ChargeID != cs[0].id) {
				t.Fatalf("order %s charged under %s (%q), the gateway charged: %s", inv.OrderID, m.name(inv.EventID), inv.ChargeID, m.describeCharges(cs))
			}
		case order.StatusDeclined, order.StatusRejected:
			if len(cs) != 0 {
				t.Fatalf("order %s %s under %s, yet the gateway charged it: %s", inv.OrderID, inv.Status, m.name(inv.EventID), m.describeCharges(cs))
			}
		}
	}
}

// checkEnd: after the drain, every order has reached an end.
func (m *model) checkEnd(t *rapid.T) {
	m.Check(t)
	if !m.cfg.promises {
		return
	}
	invs := map[string]order.Invoice{}
	for _, inv := range m.invoices(t) {
		invs[inv.OrderID] = inv
	}
	for _, o := range m.orders {
		if !slices.ContainsFunc(m.events, func(ev *modelEvent) bool { return ev.evt.OrderID == o }) {
			continue
		}
		inv, ok := invs[o]
		if !ok {
			t.Fatalf("order %s had events and has no invoice", o)
		}
		m.mu.Lock()
		cs := m.gw.chargesOfLocked(o)
		m.mu.Unlock()
		m.count("end: " + string(inv.Status))
		switch inv.Status {
		case order.StatusPending:
			t.Fatalf("order %s ends pending under %s with nothing left to resume it", o, m.name(inv.EventID))
		case order.StatusCharged:
			if inv.ChargeID != cs[0].id {
				t.Fatalf("order %s ends charged with charge id %q, the gateway's charge is %s", o, inv.ChargeID, cs[0].id)
			}
		case order.StatusHeld:
			// At most one charge, which Check saw to.
		case order.StatusRejected:
			// The gateway's refusal sends its event to the DLQ; a person's
			// decision (Person) is the end of it.
			if !strings.Contains(inv.Reason, "by a person") && !slices.ContainsFunc(m.records, func(r *record) bool { return r.ev.evt.OrderID == o && r.state == recDLQ }) {
				t.Fatalf("order %s ends rejected under %s with none of its events in the DLQ", o, m.name(inv.EventID))
			}
		}
	}
	m.checkEvents(t, invs)
}

// checkEvents publishes the outbox and checks what a downstream service
// would read: every event's id is the one computed from its transition
// (however many times a crash, a lost settle redone or a person made it
// written), every final invoice's transition was published, and a service
// that drops the ids it has seen ends at each invoice's final status.
func (m *model) checkEvents(t *rapid.T, invs map[string]order.Invoice) {
	pub := &recordingPublisher{}
	relay := relay.New(m.store, pub, relay.Options{Batch: 50})
	for {
		n, err := relay.Pass(context.Background())
		if err != nil {
			t.Fatalf("publish the outbox: %v", err)
		}
		if n == 0 {
			break
		}
	}
	published := map[uuid.UUID]bool{}
	// A downstream service as §9 tells it to be: it drops an event whose id
	// it has seen, and takes each order's last event as its state.
	downstream := map[string]order.InvoiceStatus{}
	for _, e := range pub.published() {
		if !published[e.EventID] {
			published[e.EventID] = true
			downstream[e.OrderID] = e.Status
		}
		if !m.transitionID(e) {
			t.Fatalf("event %s of %s %s under %s: not its transition's id", e.EventID, e.OrderID, e.Status, m.name(e.IdempotencyKey))
		}
		m.count("events: " + string(e.Type()))
	}
	for o, inv := range invs {
		if !inv.Status.Final() {
			continue
		}
		if !published[order.InvoiceEventID(o, inv.EventID, inv.Status, inv.Reopens)] {
			t.Fatalf("order %s ends %s under %s (reopened %d times) with no event of that transition", o, inv.Status, m.name(inv.EventID), inv.Reopens)
		}
		if downstream[o] != inv.Status {
			t.Fatalf("order %s ends %s under %s; a service deduplicating its events by id ends at %q", o, inv.Status, m.name(inv.EventID), downstream[o])
		}
	}
}

// transitionID tells whether e's id is InvoiceEventID of its order, key and
// status after some number of reopens (a run reopens an invoice far fewer
// times than this bound).
func (m *model) transitionID(e order.InvoiceEvent) bool {
	for reopens := range 100 {
		if e.EventID == order.InvoiceEventID(e.OrderID, e.IdempotencyKey, e.Status, reopens) {
			return true
		}
	}
	return false
}

// drain ends everything: the gateway answers every request 201 (or as its
// rules say) and every paused settle goes on; attempts expire; every
// record is handled until it commits or is dead-lettered; then completer
// passes, a back-off apart, until one claims nothing.
func (m *model) drain(t *rapid.T) {
	m.logf(t, "drain")
	m.healthy = true
	for round := 0; ; round++ {
		m.settleDown(t)
		var recs []*record
		for _, r := range m.records {
			if r.state == recQueued || r.state == recWaiting {
				recs = append(recs, r)
			}
		}
		if len(recs) == 0 {
			break
		}
		if round == drainRounds {
			t.Fatalf("the drain left %d records unhandled after %d rounds", len(recs), drainRounds)
		}
		m.passTime(t, modelTerms.Life+5*time.Second, false)
		for _, r := range recs {
			if r.state == recQueued || r.state == recWaiting {
				m.deliver(t, r)
			}
		}
	}
	for pass := 0; ; pass++ {
		if pass == drainPasses {
			t.Fatalf("the completer still claimed invoices after %d passes", drainPasses)
		}
		m.passTime(t, modelMaxBackoff+time.Minute, false)
		if c := m.runPass(t, false); c.err != nil || c.res.Claimed == 0 {
			if c.err != nil {
				t.Fatalf("%s: %v", c.label, c.err)
			}
			break
		}
	}
}

func (m *model) invoices(t *rapid.T) []order.Invoice {
	rows, err := m.pool.Query(m.ctx, `SELECT order_id, event_id, status, coalesce(charge_id, ''), coalesce(reason, ''), reopens FROM invoice ORDER BY order_id`)
	if err != nil {
		t.Fatalf("read the invoices: %v", err)
	}
	defer rows.Close()
	var invs []order.Invoice
	for rows.Next() {
		var (
			inv    order.Invoice
			status string
		)
		if err := rows.Scan(&inv.OrderID, &inv.EventID, &status, &inv.ChargeID, &inv.Reason, &inv.Reopens); err != nil {
			t.Fatalf("read the invoices: %v", err)
		}
		inv.Status = order.InvoiceStatus(status)
		invs = append(invs, inv)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read the invoices: %v", err)
	}
	return invs
}

// ---- names and notes ----

// name is the model's name of an event id: its event (o1.e2).
func (m *model) name(id uuid.UUID) string {
	if n, ok := m.names[id]; ok {
		return n
	}
	return id.String()
}

// named replaces the event ids in s by their names.
func (m *model) named(s string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, n := range m.names {
		s = strings.ReplaceAll(s, id.String(), n)
	}
	return s
}

func (m *model) describeCharges(cs []gwCharge) string {
	parts := make([]string, 0, len(cs))
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s under %s (request #%d from %s)", c.id, m.name(c.key), c.by.n, c.by.call.label))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// notef keeps a line of what happened on a goroutine (or under the lock)
// for the next flushNotes; m.mu is held.
func (m *model) notef(format string, args ...any) {
	m.notes = append(m.notes, fmt.Sprintf(format, args...))
}

func (m *model) flushNotes(t *rapid.T) {
	m.mu.Lock()
	notes := m.notes
	m.notes = nil
	m.mu.Unlock()
	for _, n := range notes {
		t.Log("  " + n)
	}
}

func (m *model) logf(t *rapid.T, format string, args ...any) {
	m.flushNotes(t)
	t.Log("  " + m.named(fmt.Sprintf(format, args...)))
}

// ---- the model without its fence ----

// modelWithoutFence are the runs of the model with the fence switched off
// (noFence: every path always gets the attempt, as before issue 22), one
// per double charge issue 22 reproduced (fence_test.go). Only "at most one
// charge per order" is checked.
//   - The completer sends a stale key: the actors of that reproduction
//     (new events, the consumer's tier retries, the completer, the gateway's
//     answers); only the completer's requests wait at the gateway (every
//     event path's is answered at once), so a double charge needs the
//     completer to send, or have in flight, an old key that executes after
//     another path's 404 rejected the invoice and a new event charged it
//     under its own key.
//   - Two paths send one key: every actor but the completer; every request
//     may wait.
var modelWithoutFence = []struct {
	name string
	cfg  modelConfig
}{
	{"the_completer_sends_a_stale_key", modelConfig{orders: 1, parkEvents: false, without: []string{"Failure", "Replay", "TimePasses", "Slowness"}}},
	{"two_paths_send_one_key", modelConfig{orders: 1, parkEvents: true, without: []string{"CompleterPass"}}},
}

// envModelWithoutFence makes TestModelWithoutTheFence run: only
// TestModelFindsRacesWithoutTheFence sets it, for the test binary it runs.
const envModelWithoutFence = "BILLING_TEST_MODEL_WITHOUT_FENCE"

// TestModelFindsRacesWithoutTheFence runs the model with the fence
// switched off and expects rapid to find each double charge of
// modelWithoutFence, and to minimise it. It runs this test binary again
// (TestModelWithoutTheFence), so that rapid fails a test of its own, with
// its own flags: sequences of 15 steps on average, up to 10000 checks (it
// stops at the first failure, after a few dozen to a thousand), shrinking
// bounded to 15 s, no fail file. The minimal failing sequence is logged
// (go test -v).
func TestModelFindsRacesWithoutTheFence(t *testing.T) {
	t.Parallel()
	checks := 10000
	if f := flag.Lookup("rapid.checks"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil {
			checks = max(checks, n)
		}
	}
	for _, tc := range modelWithoutFence {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The run uses this test's Postgres server, reached as a
			// superuser through a database of its own.
			_, dsn := pgtest.NewDB(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestModelWithoutTheFence$/^"+tc.name+"$",
				"-test.v", "-test.timeout=5m", "-rapid.nofailfile", "-rapid.shrinktime=15s", "-rapid.steps=15", fmt.Sprintf("-rapid.checks=%d", checks))
			cmd.Env = append(os.Environ(), envModelWithoutFence+"=1", pgtest.EnvDatabaseURL+"="+dsn)
			out, err := cmd.CombinedOutput()
			report := string(out)
			if i := strings.Index(report, "[rapid] failed after"); i >= 0 {
				report = report[i:]
			}
			t.Logf("rapid, the model without its fence:\n%s", report)
			if err == nil || !strings.Contains(report, "[rapid] failed after") || !strings.Contains(report, "times at the gateway") {
				t.Fatalf("the model without its fence: %v; want rapid to find a double charge and minimise it", err)
			}
		})
	}
}

// TestModelWithoutTheFence is the model without its fence; it fails
// (rapid finds the double charge) when TestModelFindsRacesWithoutTheFence
// runs it, and is skipped otherwise.
func TestModelWithoutTheFence(t *testing.T) {
	if os.Getenv(envModelWithoutFence) == "" {
		t.Skip("run by TestModelFindsRacesWithoutTheFence, which expects it to fail")
	}
	for _, tc := range modelWithoutFence {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newModelEnv(t)
			rapid.Check(t, func(t *rapid.T) { env.run(t, tc.cfg) })
		})
	}
}
