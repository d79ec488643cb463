package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service/relay"
	"github.com/acme/billing/internal/testkit/pgcluster"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// recordingPublisher keeps what it is given, optionally failing after it
// kept it (a relay that published and died before deleting).
type recordingPublisher struct {
	mu     sync.Mutex
	events []order.InvoiceEvent
	fail   error
}

func (p *recordingPublisher) Publish(_ context.Context, events []order.InvoiceEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, events...)
	return p.fail
}

func (p *recordingPublisher) published() []order.InvoiceEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// publishAll runs relay passes until the outbox is empty.
func publishAll(ctx context.Context, t *testing.T, store *postgres.Store, p order.EventPublisher) {
	t.Helper()
	relay := relay.New(store, p, relay.Options{Batch: 7})
	poll.Until(t, "the outbox empty", 20*time.Second, func() bool {
		if _, err := relay.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := store.OutboxStats(ctx)
		return err == nil && st.Pending == 0
	})
}

// TestInvoiceEventIDMatchesSQL: the event id Postgres writes with a
// transition (invoice_event_id) is core's InvoiceEventID, a UUIDv7.
func TestInvoiceEventIDMatchesSQL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	for i := range 50 {
		orderID, key := fmt.Sprintf("ord-%d-é\x01%d", i, rand.Int()), newEventID(t)
		status := []order.InvoiceStatus{order.StatusCharged, order.StatusDeclined, order.StatusRejected, order.StatusHeld}[i%4]
		reopens := i % 3
		var got uuid.UUID
		if err := pool.QueryRow(ctx, `SELECT invoice_event_id($1, $2, $3, $4)`, orderID, key, string(status), reopens).Scan(&got); err != nil {
			t.Fatal(err)
		}
		want := order.InvoiceEventID(orderID, key, status, reopens)
		if got != want || got.Version() != 7 || got.Variant() != uuid.VariantRFC9562 {
			t.Fatalf("invoice_event_id(%q, %s, %s, %d) = %s, want %s, a UUIDv7", orderID, key, status, reopens, got, want)
		}
		if got == order.InvoiceEventID(orderID, key, order.StatusPending, reopens) || got == order.InvoiceEventID(orderID, key, status, reopens+1) ||
			[6]byte(got[:6]) != [6]byte(key[:6]) {
			t.Fatalf("id %s: want it to depend on the status and the reopen count and carry the key's timestamp", got)
		}
	}
}

// TestTransitionsWriteTheirEvents: every move of an
// invoice into charged, declined, rejected or held writes one event in its
// own transaction, on every path; duplicates and pending write nothing; a
// reopened invoice later charged yields InvoiceRejected, then
// InvoiceCharged.
func TestTransitionsWriteTheirEvents(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	answers := map[string][]error{ // per order, the gateway's answers in turn (nil: charge)
		"ord-charged":  {nil},
		"ord-declined": {errDeclined},
		// the redelivery of the rejected event reopens it under its own
		// key and is refused again: a second rejection, its own event
		"ord-reopened": {refused(order.RefusalRejected, 400), refused(order.RefusalRejected, 400), nil},
		"ord-held":     {refused(order.RefusalKeyReused, 422)},
		"ord-pending":  {unavailable, unavailable},
	}
	gw := &ledgertest.Gateway{}
	var mu sync.Mutex
	gw.SetAnswer(func(_ int, req order.ChargeRequest) (order.ChargeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		a := answers[req.OrderID]
		var answer error
		if len(a) > 0 {
			answer, answers[req.OrderID] = a[0], a[1:]
		}
		switch {
		case answer == nil:
			return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: "ch-" + req.OrderID}, nil
		case errors.Is(answer, errDeclined):
			return order.ChargeResult{Status: order.ChargeDeclined}, nil
		}
		return order.ChargeResult{}, answer
	})
	svc := order.NewBillingService(store, gw, group)
	evts := map[string]order.OrderConfirmedEvent{}
	for id := range answers {
		evts[id] = event(t, id)
		_, _ = svc.Bill(ctx, evts[id])
		_, _ = svc.Bill(ctx, evts[id]) // a redelivery: a duplicate, or the same refusal's duplicate
	}
	second := event(t, "ord-reopened")
	if out, err := svc.Bill(ctx, second); err != nil || out != order.OutcomeCharged {
		t.Fatalf("the reopening event = %s, %v, want charged", out, err)
	}
	if _, err := svc.Bill(ctx, event(t, "ord-charged")); err != nil {
		t.Fatal(err) // a duplicate by order: no event
	}

	p := &recordingPublisher{}
	publishAll(ctx, t, store, p)
	type want struct {
		order   string
		key     uuid.UUID
		status  order.InvoiceStatus
		reopens int
	}
	wants := []want{
		{"ord-charged", evts["ord-charged"].EventID, order.StatusCharged, 0},
		{"ord-declined", evts["ord-declined"].EventID, order.StatusDeclined, 0},
		{"ord-held", evts["ord-held"].EventID, order.StatusHeld, 0},
		{"ord-reopened", evts["ord-reopened"].EventID, order.StatusRejected, 0},
		{"ord-reopened", evts["ord-reopened"].EventID, order.StatusRejected, 1},
		{"ord-reopened", second.EventID, order.StatusCharged, 2},
	}
	got := p.published()
	if len(got) != len(wants) {
		t.Fatalf("published %d events, want %d: %+v", len(got), len(wants), got)
	}
	byOrder := map[string][]order.InvoiceEvent{}
	for _, e := range got {
		byOrder[e.OrderID] = append(byOrder[e.OrderID], e)
	}
	for _, w := range wants {
		es := byOrder[w.order]
		if len(es) == 0 {
			t.Errorf("no event of %s %s", w.order, w.status)
			continue
		}
		e := es[0]
		byOrder[w.order] = es[1:]
		if e.Status != w.status || e.IdempotencyKey != w.key || e.EventID != order.InvoiceEventID(w.order, w.key, w.status, w.reopens) ||
			e.Amount != 12990 || e.Currency != "EUR" || e.CustomerID != "cus-"+w.order || e.OccurredAt.IsZero() {
			t.Errorf("event of %s = %+v, want %s under %s with its id", w.order, e, w.status, w.key)
		}
		if w.status == order.StatusCharged && e.ChargeID != "ch-"+w.order {
			t.Errorf("InvoiceCharged of %s: charge id %q", w.order, e.ChargeID)
		}
		if (w.status == order.StatusRejected || w.status == order.StatusHeld) && e.Reason == "" {
			t.Errorf("%s of %s without a reason", e.Type(), w.order)
		}
	}
}

var (
	errDeclined = errors.New("decline")
	unavailable = order.MarkChargeEnded(&order.TransientError{Op: "charge", Err: errors.New("503")})
)

// TestEventsOfTheOtherTransitions: a hold by the key's age (reserve, take,
// the completer's sweep) and a person's decision write their events too;
// a resume writes none.
func TestEventsOfTheOtherTransitions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	aged := order.AttemptTerms{Life: time.Minute, HoldAfter: time.Nanosecond}
	keys := map[string]uuid.UUID{}
	for _, id := range []string{"ord-reserve", "ord-take", "ord-sweep", "ord-resolved"} {
		keys[id] = newEventID(t)
		if _, err := store.Reserve(ctx, pendingInvoice(id, keys[id]), group, ended); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := store.Reserve(ctx, pendingInvoice("ord-reserve", newEventID(t)), group, aged); err != nil || !r.Held {
		t.Fatalf("Reserve past the key's age = %+v, %v, want held", r, err)
	}
	if tk, err := store.TakeAttempt(ctx, "ord-take", keys["ord-take"], aged); err != nil || !tk.Held {
		t.Fatalf("TakeAttempt past the key's age = %+v, %v, want held", tk, err)
	}
	held, err := store.HoldStale(ctx, aged)
	if err != nil || len(held) != 2 {
		t.Fatalf("HoldStale() = %v, %v, want ord-sweep and ord-resolved", held, err)
	}
	if _, _, err := store.Resolve(ctx, "ord-resolved", order.Resolution{Status: order.StatusCharged, ChargeID: "ch_by_hand", Key: keys["ord-resolved"], By: "alice"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Resolve(ctx, "ord-sweep", order.Resolution{Status: order.StatusPending, Key: keys["ord-sweep"], By: "alice"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	p := &recordingPublisher{}
	publishAll(ctx, t, store, p)
	var got []string
	for _, e := range p.published() {
		if e.EventID != order.InvoiceEventID(e.OrderID, keys[e.OrderID], e.Status, 0) {
			t.Errorf("event %+v: id not its transition's", e)
		}
		got = append(got, e.OrderID+" "+string(e.Type()))
	}
	slices.Sort(got)
	want := []string{"ord-reserve InvoiceHeld", "ord-resolved InvoiceCharged", "ord-resolved InvoiceHeld", "ord-sweep InvoiceHeld", "ord-take InvoiceHeld"}
	if !slices.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
}

// TestNoEventsWhenPublishingIsOff: BILLING_PUBLISH_EVENTS=false writes no
// outbox rows.
func TestNoEventsWhenPublishingIsOff(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	e := newBillingEnv(t) // a store without WithEvents
	e.bill(ctx, t, event(t, "ord-1"), order.OutcomeCharged)
	if st, err := e.store.OutboxStats(ctx); err != nil || st.Pending != 0 {
		t.Errorf("OutboxStats() = %+v, %v, want nothing written", st, err)
	}
}

// TestRepublishedWithTheSameID: a settle lost in a crash and redone, and
// a relay that published and died before deleting, publish the same event
// id, never a new one.
func TestRepublishedWithTheSameID(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	ledger := &beforeSettle{Store: postgres.NewStore(pool, postgres.WithEvents(true)), pool: pool, rows: map[string]json.RawMessage{}}
	stub, client := startStub(t)
	svc := order.NewBillingService(ledger, client, group, order.WithAttemptTerms(shortAttempts))
	evt := event(t, "ord-1")
	if out, err := svc.Bill(ctx, evt); err != nil || out != order.OutcomeCharged {
		t.Fatalf("Bill() = %s, %v", out, err)
	}
	want := order.InvoiceEventID("ord-1", evt.EventID, order.StatusCharged, 0)

	// The settle is lost in a Postgres crash, its outbox row with it, before
	// any relay ran (TestPublishesOnlyDurableTransitions), and redone from
	// the redelivered event: its row comes back with the same id.
	ledger.loseSettle(ctx, t, "ord-1")
	if out, err := billUntilFinal(ctx, t, svc, evt); err != nil || out != order.OutcomeCharged {
		t.Fatalf("Bill() after the lost settle = %s, %v", out, err)
	}

	// The relay publishes, then dies before its commit; the next pass
	// publishes the row again, same id.
	dying := &recordingPublisher{fail: errors.New("killed after the write")}
	relay := relay.New(ledger.Store, dying, relay.Options{})
	if _, err := relay.Pass(ctx); err == nil {
		t.Fatal("Pass() with a dying publisher: no error")
	}
	again := &recordingPublisher{}
	publishAll(ctx, t, ledger.Store, again)

	for name, p := range map[string]*recordingPublisher{"dying relay": dying, "next relay": again} {
		if got := p.published(); len(got) != 1 || got[0].EventID != want {
			t.Errorf("%s published %v, want %s once", name, got, want)
		}
	}
	if cs := stub.ChargesForOrder("ord-1"); len(cs) != 1 {
		t.Errorf("charges = %d, want 1", len(cs))
	}
}

// TestPublishesOnlyDurableTransitions: a settle commits with
// synchronous_commit off, so for a moment it is visible and not yet on
// disk; a Postgres crash then loses it, its outbox row with it. Had the
// relay published that row, a downstream service would hold an event of a
// transition billing no longer has, and the same transition made again
// later (after, say, a hold in between) would reach it as a duplicate
// under the id it has seen. So the relay publishes a row only once the
// WAL is flushed past it. The cluster's WAL writer is made lazy, so that
// nothing else flushes the settle while the test looks.
func TestPublishesOnlyDurableTransitions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, pool := pgtest.NewMigratedClusterWith(t, pgcluster.Options{Fsync: true,
		Settings: map[string]string{"wal_writer_delay": "10s", "wal_writer_flush_after": "0"}})
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	svc := order.NewBillingService(store, &ledgertest.Gateway{}, group)
	if out, err := svc.Bill(ctx, event(t, "ord-1")); err != nil || out != order.OutcomeCharged {
		t.Fatalf("Bill() = %s, %v", out, err)
	}
	var settled, flushedNow string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text`).Scan(&settled, &flushedNow); err != nil {
		t.Fatal(err)
	}
	var durable bool
	if err := pool.QueryRow(ctx, `SELECT $1::pg_lsn <= $2::pg_lsn`, settled, flushedNow).Scan(&durable); err != nil {
		t.Fatal(err)
	}
	if durable {
		t.Skip("the settle was flushed before the relay ran: nothing to check on this run")
	}
	var publishedDurable []bool
	_, err := store.PublishPending(ctx, 10, func(ctx context.Context, events []order.InvoiceEvent) error {
		var ok bool
		err := pool.QueryRow(ctx, `SELECT $1::pg_lsn <= pg_current_wal_flush_lsn()`, settled).Scan(&ok)
		publishedDurable = append(publishedDurable, ok)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(publishedDurable) != 1 || !publishedDurable[0] {
		t.Errorf("publish called with the settle flushed: %v, want [true] (one batch, after the flush)", publishedDurable)
	}
}
