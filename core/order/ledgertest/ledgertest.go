// Package ledgertest is the contract of order.Ledger, run on every
// implementation: a table of scenarios (Scenarios), each a few calls of
// Reserve, TakeAttempt, Settle and Release with what each must report, and
// Mem, the in-memory ledger that core/order's tests bill against. The
// Postgres store runs the same table alone and with its calls grouped
// (infra/postgres). It is test tooling: production code does not import it.
//
// It holds the contracts of the ports beside the ledger too, which the
// same store implements: order.Outbox, the outbox relay's (RunOutbox), and
// order.PendingLedger, the pending completer's (RunPending). Mem implements
// both, so that the relay's and the completer's tests need no Postgres.
//
// It is kept in core rather than under internal/testkit, where the rest of
// the tooling lives: core/order's own tests import it, and core imports
// nothing outside core (.golangci.yaml's depguard rules "core" and
// "no-test-tooling" say both).
//
// The rules are docs/interface.md §4 as the ledger sees them, "one attempt per
// key at a time" included: a reserve or a take gives its caller the
// invoice's attempt only when no other attempt is alive; only the attempt's
// holder, or anyone once no attempt is alive, settles; a key first sent
// longer ago than the terms allow is held, never sent again.
package ledgertest

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// Group is the consumer group of the steps that name none.
const Group = "billing-contract"

// DefaultLife is the attempts' life in the steps that set none: long next
// to any test, so an attempt ends only when a step ends it.
const DefaultLife = time.Minute

// expiringLife is the life of an attempt that has ended by the next call.
const expiringLife = time.Microsecond

type op int

const (
	opReserve op = iota + 1
	opTake
	opSettle
	opRelease
)

// Step is one call of a scenario and what it must report. Build steps with
// Reserve, Take, Settle and Release and their methods.
type Step struct {
	op      op
	event   string // reserve: the event (by name); take, settle, release: the key (the name of the event it is)
	order   string
	amount  int64
	group   string
	status  order.InvoiceStatus // settle
	attempt string              // settle, release: the attempt's name; reserve, take: the name its attempt gets
	life    time.Duration
	hold    time.Duration

	// what it must report
	first, found, reopened bool
	taken, busy, held      bool
	key                    string
	want                   order.InvoiceStatus
	settled                bool
	fails                  bool
}

// Reserve is a Reserve of event (by name) for orderID with amount.
func Reserve(event, orderID string, amount int64) Step {
	return Step{op: opReserve, event: event, order: orderID, amount: amount, attempt: event}
}

// Take is a TakeAttempt of orderID's invoice under key (an event's name).
func Take(key, orderID string) Step {
	return Step{op: opTake, event: key, order: orderID, attempt: "take:" + key}
}

// Settle settles orderID's invoice under key with the named attempt.
func Settle(key, orderID, attempt string, status order.InvoiceStatus) Step {
	return Step{op: opSettle, event: key, order: orderID, attempt: attempt, status: status}
}

// Release releases the named attempt of orderID's invoice under key.
func Release(key, orderID, attempt string) Step {
	return Step{op: opRelease, event: key, order: orderID, attempt: attempt}
}

// As names the attempt a reserve or take gets.
func (s Step) As(name string) Step { s.attempt = name; return s }

// InGroup makes a reserve in consumer group g.
func (s Step) InGroup(g string) Step { s.group = g; return s }

// Expiring gives the attempt a reserve or take gets a life that has ended
// by the next call: a pod that died while its request was out.
func (s Step) Expiring() Step { s.life = expiringLife; return s }

// HoldAfter sets the terms' key age past which an invoice is held.
func (s Step) HoldAfter(d time.Duration) Step { s.hold = d; return s }

// Got says what a reserve must find: whether the event was first seen,
// whether the order has an invoice, whether this reserve reopened it, and
// the invoice's key (an event's name) and status.
func (s Step) Got(first, found, reopened bool, key string, status order.InvoiceStatus) Step {
	s.first, s.found, s.reopened, s.key, s.want = first, found, reopened, key, status
	return s
}

// Found says what a take must find: the invoice's key and status.
func (s Step) Found(key string, status order.InvoiceStatus) Step {
	s.found, s.key, s.want = true, key, status
	return s
}

// Taken: the reserve or take gets the attempt.
func (s Step) Taken() Step { s.taken = true; return s }

// Busy: another attempt is alive; the call gets none and a wait.
func (s Step) Busy() Step { s.busy = true; return s }

// Held: the call held the invoice (its key too old).
func (s Step) Held() Step { s.held = true; return s }

// Settled says whether a settle must move the invoice.
func (s Step) Settled(ok bool) Step { s.settled = ok; return s }

// Fails: the call must return an error.
func (s Step) Fails() Step { s.fails = true; return s }

// Grouped reports whether the step's call reaches the server through the
// store's groups (a reserve, or a settle to a final status), so that a test
// may hold such calls back until they form groups.
func (s Step) Grouped() bool {
	return s.op == opReserve || (s.op == opSettle && s.status.Final())
}

// Scenario is a row of the contract: steps run in order on one ledger.
type Scenario struct {
	Name  string
	Steps []Step
}

// Scenarios returns the contract's table.
func Scenarios() []Scenario {
	const (
		P = order.StatusPending
		C = order.StatusCharged
		D = order.StatusDeclined
		R = order.StatusRejected
		H = order.StatusHeld
	)
	return []Scenario{
		{"first time", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken()}},
		{"the same event again while its attempt lives waits", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Reserve("E1", "A", 100).As("again").Got(false, true, false, "E1", P).Busy()}},
		{"duplicate by order", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", C).Settled(true),
			Reserve("E2", "A", 200).Got(true, true, false, "E1", C)}},
		{"another group dedups apart, shares the invoice and its attempt", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Reserve("E1", "A", 100).As("other").InGroup("other-group").Got(true, true, false, "E1", P).Busy()}},
		{"reused id for another order opens nothing", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Reserve("E1", "B", 500).As("b").Got(false, false, false, "", "")}},
		{"a key another order's invoice holds opens nothing, even first seen", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Reserve("E1", "B", 500).As("b").InGroup("other-group").Got(true, false, false, "", "")}},
		{"pending resumed under its key once the attempt is released", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Release("E1", "A", "E1"),
			Reserve("E2", "A", 200).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E2", C).Settled(true)}},
		{"a second path waits while the first attempt lives, and settles nothing", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Reserve("E2", "A", 200).Got(true, true, false, "E1", P).Busy(),
			Settle("E1", "A", "E2", R).Settled(false),
			Settle("E1", "A", "E1", C).Settled(true)}},
		{"an expired attempt is taken over; its late answer settles nothing", []Step{
			Reserve("E1", "A", 100).Expiring().Got(true, true, false, "E1", P).Taken(),
			Reserve("E2", "A", 200).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", R).Settled(false),
			Settle("E1", "A", "E2", C).Settled(true)}},
		{"an expired attempt nobody took over settles its own answer", []Step{
			Reserve("E1", "A", 100).Expiring().Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", C).Settled(true)}},
		{"a stale release does not end the live attempt", []Step{
			Reserve("E1", "A", 100).Expiring().Got(true, true, false, "E1", P).Taken(),
			Take("E1", "A").As("t").Found("E1", P).Taken(),
			Release("E1", "A", "E1"),
			Reserve("E2", "A", 200).Got(true, true, false, "E1", P).Busy()}},
		{"422 holds the invoice: no attempt, no reopen, no take", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", H).Settled(true),
			Reserve("E2", "A", 200).Got(true, true, false, "E1", H),
			Reserve("E1", "A", 100).As("replay").Got(false, true, false, "E1", H),
			Take("E1", "A").Found("E1", H)}},
		{"a key past its age is held at the reserve", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Release("E1", "A", "E1"),
			Reserve("E2", "A", 200).HoldAfter(time.Nanosecond).Got(true, true, false, "E1", H).Held()}},
		{"a key past its age is held at a take", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Release("E1", "A", "E1"),
			Take("E1", "A").HoldAfter(time.Nanosecond).Found("E1", H).Held()}},
		{"no hold while an attempt lives", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Reserve("E2", "A", 200).HoldAfter(time.Nanosecond).Got(true, true, false, "E1", P).Busy(),
			Settle("E1", "A", "E1", C).Settled(true)}},
		{"a young key is not held", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Release("E1", "A", "E1"),
			Reserve("E2", "A", 200).HoldAfter(time.Hour).Got(true, true, false, "E1", P).Taken()}},
		{"take: another key, or a settled invoice, gives nothing", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Release("E1", "A", "E1"),
			Take("E2", "A").Found("E1", P),
			Settle("E1", "A", "E1", D).Settled(true),
			Take("E1", "A").Found("E1", D)}},
		{"rejected reopened by a new event", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", R).Settled(true),
			Reserve("E2", "A", 777).Got(true, true, true, "E2", P).Taken()}},
		{"rejected reopened by the replay of its event", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", R).Settled(true),
			Reserve("E1", "A", 100).As("replay").Got(false, true, true, "E1", P).Taken()}},
		{"rejected reopened by the replay of an event first seen for this order", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Release("E1", "A", "E1"),
			Reserve("E2", "A", 90).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E2", R).Settled(true),
			Reserve("E2", "A", 90).As("replay").Got(false, true, true, "E2", P).Taken()}},
		{"rejected stays for a seen id first seen for another order", []Step{
			// E2 is first seen for B, whose invoice is E0's: E2 keys nothing.
			Reserve("E0", "B", 500).Got(true, true, false, "E0", P).Taken(),
			Settle("E0", "B", "E0", C).Settled(true),
			Reserve("E2", "B", 500).Got(true, true, false, "E0", C),
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", R).Settled(true),
			Reserve("E2", "A", 300).As("e2-for-a").Got(false, true, false, "E1", R)}},
		{"rejected stays for a key another invoice holds", []Step{
			Reserve("E2", "B", 500).Got(true, true, false, "E2", P).Taken(),
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", R).Settled(true),
			Reserve("E2", "A", 300).As("e2-for-a").InGroup("other-group").Got(true, true, false, "E1", R)}},
		{"a late answer to the old key settles nothing after a reopen", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", R).Settled(true),
			Reserve("E2", "A", 200).Got(true, true, true, "E2", P).Taken(),
			Settle("E1", "A", "E1", C).Settled(false),
			Settle("E2", "A", "E2", C).Settled(true),
			Reserve("E3", "A", 300).Got(true, true, false, "E2", C)}},
		{"final stays final", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", D).Settled(true),
			Settle("E1", "A", "E1", C).Settled(false),
			Settle("E1", "A", "E1", R).Settled(false),
			Reserve("E1", "A", 100).As("replay").Got(false, true, false, "E1", D)}},
		{"settle to a status that is not final fails", []Step{
			Reserve("E1", "A", 100).Got(true, true, false, "E1", P).Taken(),
			Settle("E1", "A", "E1", P).Fails(),
			Settle("E1", "A", "E1", "refunded").Fails(),
			Settle("E1", "A", "E1", C).Settled(true)}},
	}
}

// Runner runs one scenario's steps on a ledger: event names become fresh
// ids, order ids get a prefix (so that scenarios can share a ledger), and
// attempts are remembered by name.
type Runner struct {
	prefix   string
	ids      map[string]uuid.UUID
	names    map[uuid.UUID]string
	attempts map[string]int64
	// expired is when the attempts of the last Expiring step have surely
	// ended: the next step starts after it, since a ledger whose clock is
	// this process's (Mem) can be called again within expiringLife.
	expired time.Time
}

// NewRunner makes the ids of every event sc names, up front, so that its
// steps may run on other goroutines.
func NewRunner(t *testing.T, prefix string, sc Scenario) *Runner {
	t.Helper()
	r := &Runner{prefix: prefix, ids: map[string]uuid.UUID{}, names: map[uuid.UUID]string{}, attempts: map[string]int64{}}
	for _, s := range sc.Steps {
		if _, ok := r.ids[s.event]; !ok {
			id, err := uuid.NewV7()
			if err != nil {
				t.Fatal(err)
			}
			r.ids[s.event], r.names[id] = id, s.event
		}
	}
	return r
}

func (s Step) terms() order.AttemptTerms {
	t := order.AttemptTerms{Life: DefaultLife, HoldAfter: s.hold}
	if s.life > 0 {
		t.Life = s.life
	}
	return t
}

// Step runs step i (from 0) of its scenario on l and reports, with
// t.Errorf, where it differs from what the step expects; false when it could
// not run (an error it did not expect).
func (r *Runner) Step(ctx context.Context, t *testing.T, l order.Ledger, i int, s Step) bool {
	for time.Now().Before(r.expired) {
		runtime.Gosched() // at most expiringLife
	}
	if s.life == expiringLife {
		defer func() { r.expired = time.Now().Add(expiringLife) }()
	}
	orderID := r.prefix + s.order
	switch s.op {
	case opSettle:
		ok, err := l.Settle(ctx, order.Settlement{OrderID: orderID, Key: r.ids[s.event], Attempt: r.attempts[s.attempt],
			Status: s.status, ChargeID: "ch-" + s.event, Reason: "reason of " + s.event})
		switch {
		case s.fails && err == nil:
			t.Errorf("step %d: Settle(%s, key %s, %s) = %v, want an error", i+1, orderID, s.event, s.status, ok)
		case s.fails:
		case err != nil || ok != s.settled:
			t.Errorf("step %d: Settle(%s, key %s, attempt %s, %s) = %v, %v, want %v", i+1, orderID, s.event, s.attempt, s.status, ok, err, s.settled)
			return err == nil
		}
		return true
	case opRelease:
		if err := l.Release(ctx, orderID, r.ids[s.event], r.attempts[s.attempt], "503"); err != nil {
			t.Errorf("step %d: Release(%s, attempt %s) error = %v", i+1, orderID, s.attempt, err)
			return false
		}
		return true
	case opTake:
		tk, err := l.TakeAttempt(ctx, orderID, r.ids[s.event], s.terms())
		if err != nil {
			t.Errorf("step %d: TakeAttempt(%s, key %s) error = %v", i+1, orderID, s.event, err)
			return false
		}
		if tk.Found != s.found || r.names[tk.Invoice.EventID] != s.key || tk.Invoice.Status != s.want || tk.Held != s.held {
			t.Errorf("step %d: TakeAttempt(%s, key %s) = found %v held %v, %s under %s; want %v %v, %s under %s",
				i+1, orderID, s.event, tk.Found, tk.Held, tk.Invoice.Status, r.names[tk.Invoice.EventID], s.found, s.held, s.want, s.key)
		}
		r.checkAttempt(t, i, "TakeAttempt", s, tk.Attempt, tk.Wait)
		return true
	}
	g := Group
	if s.group != "" {
		g = s.group
	}
	inv := order.Invoice{OrderID: orderID, EventID: r.ids[s.event], CustomerID: "cus-" + s.event, Amount: s.amount,
		Currency: "EUR", Status: order.StatusPending}
	res, err := l.Reserve(ctx, inv, g, s.terms())
	if err != nil {
		t.Errorf("step %d: Reserve(%s of %s) error = %v", i+1, s.event, orderID, err)
		return false
	}
	if res.FirstSeen != s.first || res.Found != s.found || res.Reopened != s.reopened || res.Held != s.held ||
		r.names[res.Invoice.EventID] != s.key || res.Invoice.Status != s.want {
		t.Errorf("step %d: Reserve(%s of %s) = first %v found %v reopened %v held %v, %s under %s; want %v %v %v %v, %s under %s",
			i+1, s.event, orderID, res.FirstSeen, res.Found, res.Reopened, res.Held, res.Invoice.Status, r.names[res.Invoice.EventID],
			s.first, s.found, s.reopened, s.held, s.want, s.key)
	}
	r.checkAttempt(t, i, "Reserve", s, res.Attempt, res.Wait)
	if res.Found && res.Invoice.EventID == inv.EventID && (res.Invoice.Amount != s.amount || res.Invoice.CustomerID != inv.CustomerID) {
		t.Errorf("step %d: invoice %+v, want the amount and customer of %s", i+1, res.Invoice, s.event)
	}
	if res.Found && (res.Invoice.OrderID != orderID || res.Invoice.CreatedAt.IsZero()) {
		t.Errorf("step %d: invoice %+v, want order %s's with its created_at", i+1, res.Invoice, orderID)
	}
	if res.Found && res.Invoice.Status == order.StatusHeld && res.Invoice.Reason == "" {
		t.Errorf("step %d: held invoice %+v without a reason", i+1, res.Invoice)
	}
	return true
}

// checkAttempt checks what a reserve or take says of the attempt, and
// remembers a taken one under the step's name.
func (r *Runner) checkAttempt(t *testing.T, i int, call string, s Step, attempt int64, wait time.Duration) {
	t.Helper()
	if (attempt != 0) != s.taken {
		t.Errorf("step %d: %s(%s) attempt %d, want taken %v", i+1, call, s.event, attempt, s.taken)
	}
	if s.taken {
		r.attempts[s.attempt] = attempt
	}
	if s.busy && (wait <= 0 || wait > s.terms().Life) {
		t.Errorf("step %d: %s(%s) wait %v, want the other attempt's life left, in (0, %v]", i+1, call, s.event, wait, s.terms().Life)
	}
	if !s.busy && wait != 0 {
		t.Errorf("step %d: %s(%s) wait %v, want 0 (no other attempt alive)", i+1, call, s.event, wait)
	}
}

// Run runs every scenario on a ledger of its own from newLedger, one step
// after the other.
func Run(t *testing.T, newLedger func(t *testing.T) order.Ledger) {
	t.Helper()
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			r := NewRunner(t, "", sc)
			for i, s := range sc.Steps {
				if !r.Step(t.Context(), t, l, i, s) {
					t.FailNow()
				}
			}
		})
	}
}
