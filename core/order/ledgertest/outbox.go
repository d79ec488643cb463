package ledgertest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// Store is what the outbox relay and the pending completer read, and the
// ledger whose transitions write it: infra/postgres's Store, and Mem.
// RunOutbox and RunPending check both against the same table.
type Store interface {
	order.Ledger
	order.Outbox
	order.PendingLedger
}

// Terms of the contracts' calls: an attempt alive for the whole test, and
// one that has ended by the next call (see afterExpiry).
var (
	live  = order.AttemptTerms{Life: DefaultLife}
	ended = order.AttemptTerms{Life: expiringLife}
)

// afterExpiry returns once an attempt taken with the ended terms has ended
// by the clock of a ledger in this process (Mem); Postgres's clock moves on
// between transactions anyway.
func afterExpiry() {
	for until := time.Now().Add(expiringLife); time.Now().Before(until); {
		runtime.Gosched()
	}
}

// contractCtx is a test's context, bounded: every call of the contracts
// returns well within it.
func contractCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newKey(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// reserve reserves a new event of orderID under terms and returns its key
// and what the reserve found.
func reserve(ctx context.Context, t *testing.T, s order.Ledger, orderID string, terms order.AttemptTerms) (uuid.UUID, order.Reservation) {
	t.Helper()
	key := newKey(t)
	r, err := s.Reserve(ctx, order.Invoice{OrderID: orderID, EventID: key, CustomerID: "cus-" + orderID, Amount: 12990,
		Currency: "EUR", Status: order.StatusPending}, Group, terms)
	if err != nil {
		t.Fatalf("Reserve(%s) error = %v", orderID, err)
	}
	return key, r
}

// open reserves a new event of orderID, which must open (or reopen) the
// order's invoice under its key and take its attempt.
func open(ctx context.Context, t *testing.T, s order.Ledger, orderID string, terms order.AttemptTerms) (uuid.UUID, int64) {
	t.Helper()
	key, r := reserve(ctx, t, s, orderID, terms)
	if !r.Found || r.Invoice.EventID != key || r.Attempt == 0 {
		t.Fatalf("Reserve(%s) = %+v, want its invoice under the new key, the attempt taken", orderID, r)
	}
	return key, r.Attempt
}

// decide opens orderID's invoice under a new key and settles it to status.
func decide(ctx context.Context, t *testing.T, s order.Ledger, orderID string, status order.InvoiceStatus) uuid.UUID {
	t.Helper()
	key, attempt := open(ctx, t, s, orderID, live)
	st := order.Settlement{OrderID: orderID, Key: key, Attempt: attempt, Status: status}
	switch status {
	case order.StatusCharged:
		st.ChargeID = "ch-" + orderID
	case order.StatusRejected, order.StatusHeld:
		st.Reason = "400 Bad Request"
	}
	if ok, err := s.Settle(ctx, st); err != nil || !ok {
		t.Fatalf("Settle(%s, %s) = %v, %v; want it settled", orderID, status, ok, err)
	}
	return key
}

// pass is one PublishPending of up to limit events that publish takes; it
// returns them.
func pass(ctx context.Context, t *testing.T, s order.Outbox, limit int) []order.InvoiceEvent {
	t.Helper()
	var got []order.InvoiceEvent
	n, err := s.PublishPending(ctx, limit, func(_ context.Context, events []order.InvoiceEvent) error {
		if got != nil {
			t.Error("publish called twice in one pass")
		}
		got = slices.Clone(events)
		return nil
	})
	if err != nil || n != len(got) {
		t.Fatalf("PublishPending(%d) = %d, %v; publish was given %d", limit, n, err, len(got))
	}
	return got
}

// ids is the event ids of events, in their order.
func ids(events []order.InvoiceEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, e := range events {
		out[i] = e.EventID
	}
	return out
}

// wantEvent fails t unless e is the event of orderID's transition under key
// into status after reopens reopens, with the invoice's fields.
func wantEvent(t *testing.T, e order.InvoiceEvent, orderID string, key uuid.UUID, status order.InvoiceStatus, reopens int) {
	t.Helper()
	if e.EventID != order.InvoiceEventID(orderID, key, status, reopens) || e.Status != status || e.OrderID != orderID ||
		e.IdempotencyKey != key || e.CustomerID != "cus-"+orderID || e.Amount != 12990 || e.Currency != "EUR" || e.OccurredAt.IsZero() {
		t.Errorf("event %+v, want %s's %s under %s (reopened %d times), its id the transition's", e, orderID, status, key, reopens)
	}
	if wantCharge := status == order.StatusCharged; (e.ChargeID != "") != wantCharge {
		t.Errorf("%s of %s: charge id %q", e.Type(), orderID, e.ChargeID)
	}
	if wantReason := status == order.StatusRejected || status == order.StatusHeld; (e.Reason != "") != wantReason {
		t.Errorf("%s of %s: reason %q", e.Type(), orderID, e.Reason)
	}
}

// StoreScenario is a row of order.Outbox's or order.PendingLedger's
// contract: calls on one Store and what they must give.
type StoreScenario struct {
	Name string
	Run  func(ctx context.Context, t *testing.T, s Store)
}

// runStore runs scenarios on a store of its own from newStore, each a
// parallel subtest.
func runStore(t *testing.T, scenarios []StoreScenario, newStore func(t *testing.T) Store) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Run(contractCtx(t), t, newStore(t))
		})
	}
}

// OutboxScenarios returns order.Outbox's contract: what the relay may
// count on, whatever keeps the outbox (README, "What billing tells
// others").
func OutboxScenarios() []StoreScenario {
	return []StoreScenario{
		{"an empty outbox publishes nothing", outboxEmpty},
		{"each transition's event, once, with its id", outboxEachTransition},
		{"holds by the key's age write their events", outboxHolds},
		{"a failed publish keeps the events, the next pass gives the same ids", outboxFailedPublish},
		{"a pass takes at most its limit", outboxLimit},
		{"an order's events leave in the order of its transitions", outboxOrderOfTransitions},
		{"what one pass holds another does not take, nor its order's next", outboxHeldByAPass},
		{"passes at once publish every event once, each order's in order", outboxPassesAtOnce},
	}
}

// RunOutbox runs every scenario of order.Outbox's contract on a store of
// its own from newStore, each a parallel subtest. newStore must publish
// events (infra/postgres: WithEvents(true)).
func RunOutbox(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	runStore(t, OutboxScenarios(), newStore)
}

func outboxEmpty(ctx context.Context, t *testing.T, s Store) {
	n, err := s.PublishPending(ctx, 10, func(context.Context, []order.InvoiceEvent) error {
		t.Error("publish called on an empty outbox")
		return nil
	})
	if err != nil || n != 0 {
		t.Errorf("PublishPending() = %d, %v; want 0", n, err)
	}
	if st, err := s.OutboxStats(ctx); err != nil || st != (order.OutboxStats{}) {
		t.Errorf("OutboxStats() = %+v, %v; want nothing waiting", st, err)
	}
}

func outboxEachTransition(ctx context.Context, t *testing.T, s Store) {
	keys := map[string]uuid.UUID{}
	statuses := map[string]order.InvoiceStatus{"A": order.StatusCharged, "B": order.StatusDeclined,
		"C": order.StatusRejected, "D": order.StatusHeld}
	for _, id := range []string{"A", "B", "C", "D"} {
		keys[id] = decide(ctx, t, s, id, statuses[id])
	}
	// What moves no invoice writes nothing: a pending invoice, a duplicate,
	// a settle another attempt's, a second settle.
	pendingKey, _ := open(ctx, t, s, "E", live)
	if _, r := reserve(ctx, t, s, "A", live); r.Invoice.Status != order.StatusCharged {
		t.Fatalf("a second event of A = %+v, want the charged invoice", r)
	}
	if ok, err := s.Settle(ctx, order.Settlement{OrderID: "E", Key: pendingKey, Attempt: 1, Status: order.StatusCharged}); err != nil || ok {
		t.Fatalf("Settle(E, another attempt) = %v, %v; want nothing settled", ok, err)
	}
	if ok, err := s.Settle(ctx, order.Settlement{OrderID: "A", Key: keys["A"], Status: order.StatusDeclined}); err != nil || ok {
		t.Fatalf("Settle(A again) = %v, %v; want nothing settled", ok, err)
	}
	if st, err := s.OutboxStats(ctx); err != nil || st.Pending != 4 {
		t.Errorf("OutboxStats() = %+v, %v; want 4 waiting", st, err)
	}
	got := pass(ctx, t, s, 100)
	if len(got) != 4 {
		t.Fatalf("published %d events, want 4: %+v", len(got), got)
	}
	for _, e := range got {
		wantEvent(t, e, e.OrderID, keys[e.OrderID], statuses[e.OrderID], 0)
	}
	if st, err := s.OutboxStats(ctx); err != nil || st != (order.OutboxStats{}) {
		t.Errorf("OutboxStats() after the pass = %+v, %v; want nothing waiting", st, err)
	}
	if again := pass(ctx, t, s, 100); len(again) != 0 {
		t.Errorf("the next pass published %+v, want nothing", again)
	}
}

func outboxHolds(ctx context.Context, t *testing.T, s Store) {
	aged := order.AttemptTerms{Life: DefaultLife, HoldAfter: time.Nanosecond}
	atReserve, _ := open(ctx, t, s, "R", ended)
	atTake, _ := open(ctx, t, s, "T", ended)
	bySweep, _ := open(ctx, t, s, "S", ended)
	afterExpiry()
	if _, r := reserve(ctx, t, s, "R", aged); !r.Held {
		t.Fatalf("Reserve past the key's age = %+v, want held", r)
	}
	if tk, err := s.TakeAttempt(ctx, "T", atTake, aged); err != nil || !tk.Held {
		t.Fatalf("TakeAttempt past the key's age = %+v, %v; want held", tk, err)
	}
	if held, err := s.HoldStale(ctx, aged); err != nil || !slices.Equal(held, []string{"S"}) {
		t.Fatalf("HoldStale() = %v, %v; want S", held, err)
	}
	got := pass(ctx, t, s, 100)
	if len(got) != 3 {
		t.Fatalf("published %d events, want 3 InvoiceHeld: %+v", len(got), got)
	}
	keys := map[string]uuid.UUID{"R": atReserve, "T": atTake, "S": bySweep}
	for _, e := range got {
		wantEvent(t, e, e.OrderID, keys[e.OrderID], order.StatusHeld, 0)
		if e.Reason != order.ReasonKeyAged {
			t.Errorf("InvoiceHeld of %s: reason %q, want the key's age", e.OrderID, e.Reason)
		}
	}
}

func outboxFailedPublish(ctx context.Context, t *testing.T, s Store) {
	for _, id := range []string{"A", "B", "C"} {
		decide(ctx, t, s, id, order.StatusCharged)
	}
	refused := errors.New("kafka: not leader for partition")
	var first []order.InvoiceEvent
	n, err := s.PublishPending(ctx, 10, func(_ context.Context, events []order.InvoiceEvent) error {
		first = slices.Clone(events)
		return refused
	})
	if err == nil || n != 0 || len(first) != 3 {
		t.Fatalf("PublishPending(refused) = %d, %v with %d events; want an error, 3 events offered", n, err, len(first))
	}
	if st, err := s.OutboxStats(ctx); err != nil || st.Pending != 3 || st.Oldest <= 0 {
		t.Errorf("OutboxStats() = %+v, %v; want 3 waiting, the oldest aged", st, err)
	}
	again := pass(ctx, t, s, 10)
	if a, b := ids(first), ids(again); !slices.Equal(a, b) {
		t.Errorf("the next pass published %v, want the same ids %v", b, a)
	}
}

func outboxLimit(ctx context.Context, t *testing.T, s Store) {
	for _, id := range []string{"A", "B", "C", "D", "E"} {
		decide(ctx, t, s, id, order.StatusCharged)
	}
	var sizes []int
	for range 4 {
		sizes = append(sizes, len(pass(ctx, t, s, 2)))
	}
	if !slices.Equal(sizes, []int{2, 2, 1, 0}) {
		t.Errorf("passes of 2 published %v, want [2 2 1 0]", sizes)
	}
}

// rejectedThenCharged rejects orderID under a first key, reopens it with a
// second event and charges it: two events of one order.
func rejectedThenCharged(ctx context.Context, t *testing.T, s Store, orderID string) (rejected, charged uuid.UUID) {
	t.Helper()
	rejected = decide(ctx, t, s, orderID, order.StatusRejected)
	charged, attempt := open(ctx, t, s, orderID, live)
	if ok, err := s.Settle(ctx, order.Settlement{OrderID: orderID, Key: charged, Attempt: attempt,
		Status: order.StatusCharged, ChargeID: "ch-" + orderID}); err != nil || !ok {
		t.Fatalf("Settle(%s reopened) = %v, %v", orderID, ok, err)
	}
	return rejected, charged
}

func outboxOrderOfTransitions(ctx context.Context, t *testing.T, s Store) {
	rejected, charged := rejectedThenCharged(ctx, t, s, "A")
	other := decide(ctx, t, s, "B", order.StatusCharged)
	first := pass(ctx, t, s, 10)
	if len(first) != 2 {
		t.Fatalf("first pass published %+v, want A's rejection and B's charge", first)
	}
	for _, e := range first {
		if e.OrderID == "A" {
			wantEvent(t, e, "A", rejected, order.StatusRejected, 0)
		} else {
			wantEvent(t, e, "B", other, order.StatusCharged, 0)
		}
	}
	second := pass(ctx, t, s, 10)
	if len(second) != 1 {
		t.Fatalf("second pass published %+v, want A's charge", second)
	}
	wantEvent(t, second[0], "A", charged, order.StatusCharged, 1)
}

func outboxHeldByAPass(ctx context.Context, t *testing.T, s Store) {
	rejected, charged := rejectedThenCharged(ctx, t, s, "A")
	other := decide(ctx, t, s, "B", order.StatusCharged)
	var (
		holding, beside []order.InvoiceEvent
		besideErr       error
	)
	_, err := s.PublishPending(ctx, 1, func(ctx context.Context, events []order.InvoiceEvent) error {
		holding = slices.Clone(events)
		// Another relay's pass while this one holds its event.
		_, besideErr = s.PublishPending(ctx, 10, func(_ context.Context, events []order.InvoiceEvent) error {
			beside = slices.Clone(events)
			return nil
		})
		return nil
	})
	if err != nil || besideErr != nil {
		t.Fatalf("PublishPending() = %v, beside it %v", err, besideErr)
	}
	if len(holding) != 1 || len(beside) != 1 {
		t.Fatalf("the holding pass got %+v, the pass beside it %+v; want one event each", holding, beside)
	}
	wantEvent(t, holding[0], "A", rejected, order.StatusRejected, 0)
	wantEvent(t, beside[0], "B", other, order.StatusCharged, 0)
	last := pass(ctx, t, s, 10)
	if len(last) != 1 {
		t.Fatalf("the last pass published %+v, want A's charge", last)
	}
	wantEvent(t, last[0], "A", charged, order.StatusCharged, 1)
}

func outboxPassesAtOnce(ctx context.Context, t *testing.T, s Store) {
	// Each order: rejected under a first key, reopened and rejected under a
	// second, reopened and charged under a third.
	const orders = 12
	var want []uuid.UUID
	for i := range orders {
		id := string(rune('a' + i))
		for j, status := range []order.InvoiceStatus{order.StatusRejected, order.StatusRejected, order.StatusCharged} {
			key := decide(ctx, t, s, id, status)
			want = append(want, order.InvoiceEventID(id, key, status, j))
		}
	}
	var (
		mu   sync.Mutex
		got  []order.InvoiceEvent
		wg   sync.WaitGroup
		errs = make([]error, 3)
	)
	for r := range 3 {
		wg.Go(func() {
			for ctx.Err() == nil {
				n, err := s.PublishPending(ctx, 5, func(_ context.Context, events []order.InvoiceEvent) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, events...)
					return nil
				})
				if err != nil {
					errs[r] = err
					return
				}
				if st, err := s.OutboxStats(ctx); n == 0 && err == nil && st.Pending == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	index := map[uuid.UUID]int{}
	for i, id := range want {
		index[id] = i
	}
	seen := map[uuid.UUID]int{}
	last := map[string]int{}
	for _, e := range got {
		seen[e.EventID]++
		i, ok := index[e.EventID]
		if !ok {
			t.Errorf("published an event of no transition: %+v", e)
			continue
		}
		if prev, ok := last[e.OrderID]; ok && prev > i {
			t.Errorf("%s: event %d published after event %d", e.OrderID, i, prev)
		}
		last[e.OrderID] = i
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s published %d times, want once", id, seen[id])
		}
	}
}
