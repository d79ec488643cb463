package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/service/completer"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgcluster"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// beforeSettle is an order.Ledger over a Store that keeps, for every
// settle, the invoice's row as it was just before it: what a settle lost in
// a Postgres crash leaves behind.
type beforeSettle struct {
	*postgres.Store
	pool *pgxpool.Pool

	mu   sync.Mutex
	rows map[string]json.RawMessage // order id → the whole invoice row before its last settle
}

func (l *beforeSettle) Settle(ctx context.Context, s order.Settlement) (bool, error) {
	var row json.RawMessage
	if err := l.pool.QueryRow(ctx, `SELECT to_jsonb(i) FROM invoice i WHERE order_id = $1`, s.OrderID).Scan(&row); err != nil {
		return false, fmt.Errorf("test: the row before the settle: %w", err)
	}
	l.mu.Lock()
	l.rows[s.OrderID] = row
	l.mu.Unlock()
	return l.Store.Settle(ctx, s)
}

// loseSettle puts orderID's invoice back, every column, to what it was
// before its settle committed.
func (l *beforeSettle) loseSettle(ctx context.Context, t *testing.T, orderID string) {
	t.Helper()
	l.mu.Lock()
	row := l.rows[orderID]
	l.mu.Unlock()
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM invoice WHERE order_id = $1`, orderID); err != nil {
			return err
		}
		// Its outbox row is lost in the same commit; no relay published it
		// (it publishes only what is durable).
		if _, err := tx.Exec(ctx, `DELETE FROM invoice_outbox WHERE order_id = $1`, orderID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO invoice SELECT * FROM jsonb_populate_record(NULL::invoice, $1)`, row)
		return err
	})
	if err != nil {
		t.Fatalf("lose the settle of %s: %v", orderID, err)
	}
}

// TestLostSettleIsRedoneFromTheGatewayReplay (store.go, settleGroup: why the
// settle need not be durable): a settle lost in a Postgres crash leaves the
// invoice pending under the key that was charged, charge_id NULL. The
// redelivered event (ord-a) and, for an order no event comes back for, the
// pending completer (ord-b) resume it under that key; the gateway answers
// the key's replay with the first charge; the invoice ends charged with that
// charge's id, and the gateway executed one charge per order.
func TestLostSettleIsRedoneFromTheGatewayReplay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	ledger := &beforeSettle{Store: postgres.NewStore(pool), pool: pool, rows: map[string]json.RawMessage{}}
	stub, client := startStub(t)
	svc := order.NewBillingService(ledger, client, group, order.WithAttemptTerms(shortAttempts))
	evts := map[string]order.OrderConfirmedEvent{"ord-a": event(t, "ord-a"), "ord-b": event(t, "ord-b")}
	firstCharge := map[string]string{}
	for id, evt := range evts {
		if out, err := svc.Bill(ctx, evt); err != nil || out != order.OutcomeCharged {
			t.Fatalf("Bill(%s) = %s, %v, want charged", id, out, err)
		}
		firstCharge[id] = invoiceOf(ctx, t, ledger.Store, id).ChargeID
		ledger.loseSettle(ctx, t, id)
		inv := invoiceOf(ctx, t, ledger.Store, id)
		if inv.Status != order.StatusPending || inv.ChargeID != "" || inv.EventID != evt.EventID {
			t.Fatalf("%s after the lost settle = %+v, want pending under %s, no charge id", id, inv, evt.EventID)
		}
	}

	// (a) The event comes back (its offset was not committed, or a replay):
	// it waits for the attempt the lost settle left alive, then resumes.
	if out, err := billUntilFinal(ctx, t, svc, evts["ord-a"]); err != nil || out != order.OutcomeCharged {
		t.Errorf("Bill(ord-a) again = %s, %v, want charged (resumed)", out, err)
	}
	// (b) Nothing comes back for ord-b: the completer finds it, once that
	// attempt has ended.
	c := completer.New(ledger.Store, svc, completer.Options{ResumeAfter: time.Nanosecond, PassTimeout: time.Second})
	charged := completeAll(ctx, t, ledger.Store, c, 1)
	if charged != 1 {
		t.Errorf("completer charged %d, want ord-b", charged)
	}

	for id, evt := range evts {
		inv := invoiceOf(ctx, t, ledger.Store, id)
		if inv.Status != order.StatusCharged || inv.ChargeID != firstCharge[id] || inv.EventID != evt.EventID {
			t.Errorf("%s = %+v, want charged with the first charge %s under %s", id, inv, firstCharge[id], evt.EventID)
		}
		if cs := stub.ChargesForOrder(id); len(cs) != 1 || cs[0].ID != firstCharge[id] {
			t.Errorf("gateway charges of %s = %+v, want one, %s", id, cs, firstCharge[id])
		}
		var replays int
		for _, call := range stub.Calls() {
			if call.OrderID == id && call.Replayed && call.Key == evt.EventID.String() {
				replays++
			}
		}
		if replays != 1 {
			t.Errorf("replays for %s = %d, want 1: the second request under its key", id, replays)
		}
	}
}

// TestLostSettleOfEveryOutcome (store.go, settleGroup: why the settle need
// not be durable, for each final status but charged, which the test above
// covers): a lost settle of a decline, a rejection (400, the gateway stores
// nothing) or a hold (422) leaves the invoice pending under the key that
// was sent; the redelivered event, or the completer when none comes back,
// sends the same key again, the gateway answers it as before, and the
// invoice ends as it was: nothing charged, no second key.
func TestLostSettleOfEveryOutcome(t *testing.T) {
	t.Parallel()
	for _, status := range []order.InvoiceStatus{order.StatusDeclined, order.StatusRejected, order.StatusHeld} {
		for _, byCompleter := range []bool{false, true} {
			name := string(status) + ", the event comes back"
			if byCompleter {
				name = string(status) + ", the completer finds it"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				pool, _ := pgtest.NewDB(t)
				ledger := &beforeSettle{Store: postgres.NewStore(pool), pool: pool, rows: map[string]json.RawMessage{}}
				stub, client := startStub(t)
				svc := order.NewBillingService(ledger, client, group, order.WithAttemptTerms(shortAttempts))
				evt := event(t, "ord-1")
				switch status {
				case order.StatusDeclined:
					evt.CustomerID = "declined-1" // the stub declines these customers
				case order.StatusRejected:
					refuseKey(stub, evt.EventID, http.StatusBadRequest)
				case order.StatusHeld:
					refuseKey(stub, evt.EventID, http.StatusUnprocessableEntity)
				}
				check := func(when string) {
					t.Helper()
					if inv := invoiceOf(ctx, t, ledger.Store, "ord-1"); inv.Status != status || inv.EventID != evt.EventID {
						t.Fatalf("invoice %s = %s under %s, want %s under %s", when, inv.Status, inv.EventID, status, evt.EventID)
					}
				}
				bill := func() {
					t.Helper()
					out, err := billUntilFinal(ctx, t, svc, evt)
					if status == order.StatusDeclined && (err != nil || out != order.OutcomeDeclined) {
						t.Fatalf("Bill() = %s, %v, want declined", out, err)
					}
					if status != order.StatusDeclined && order.Classify(err) != order.ClassPermanent {
						t.Fatalf("Bill() = %s, %v, want a permanent error (the DLQ)", out, err)
					}
				}
				bill()
				check("after the first settle")
				ledger.loseSettle(ctx, t, "ord-1")
				if inv := invoiceOf(ctx, t, ledger.Store, "ord-1"); inv.Status != order.StatusPending {
					t.Fatalf("invoice after the lost settle = %s, want pending", inv.Status)
				}
				if byCompleter {
					c := completer.New(ledger.Store, svc, completer.Options{ResumeAfter: time.Nanosecond, PassTimeout: time.Second})
					poll.Until(t, "the completer to settle the invoice again", 20*time.Second, func() bool {
						if _, err := c.Pass(ctx); err != nil {
							t.Fatal(err)
						}
						return invoiceOf(ctx, t, ledger.Store, "ord-1").Status != order.StatusPending
					})
				} else {
					bill()
				}
				check("after the lost settle was redone")
				if cs := stub.ChargesForOrder("ord-1"); len(cs) != 0 {
					t.Errorf("gateway charges = %+v, want none", cs)
				}
				for _, call := range stub.Calls() {
					if call.Key != evt.EventID.String() {
						t.Errorf("the gateway got key %s, want only %s", call.Key, evt.EventID)
					}
				}
				if n := len(stub.Calls()); n != 2 {
					t.Errorf("gateway calls = %d, want 2: the first and the one that redid the lost settle", n)
				}
			})
		}
	}
}

// shortAttempts are attempt terms for tests that wait an attempt out: a
// stub gateway answers in milliseconds, well inside a second.
var shortAttempts = order.AttemptTerms{Life: time.Second, HoldAfter: 12 * time.Hour}

// completeAll runs completer passes until no invoice is pending, and
// returns how many invoices the passes charged; want, when not -1, is how
// many pending invoices there are to begin with. An invoice whose attempt
// is still alive is skipped by a pass and claimed again after its back-off
// (the completer's PassTimeout, which the callers keep short).
func completeAll(ctx context.Context, t *testing.T, store *postgres.Store, c *completer.Completer, want int) int {
	t.Helper()
	charged := 0
	poll.Until(t, "the completer done with every pending invoice", 30*time.Second, func() bool {
		res, err := c.Pass(ctx)
		if err == nil && errors.Is(res.Stopped, context.DeadlineExceeded) && ctx.Err() == nil {
			// The pass ran out of its own PassTimeout (a loaded machine):
			// the charge it cut short failed with it, and its invoice stays
			// pending for the next pass, as in the service. The checks after
			// the passes hold the money to account.
			t.Logf("completer pass stopped by its timeout: %+v; passing again", res)
			charged += res.Outcomes[order.OutcomeCharged]
			return false
		}
		if err != nil || res.Failed != 0 || res.Stopped != nil {
			t.Fatalf("completer Pass() = %+v, %v, want no failure", res, err)
		}
		charged += res.Outcomes[order.OutcomeCharged]
		st, err := store.PendingStats(ctx)
		return err == nil && st.Count == 0
	})
	if want >= 0 && charged != want {
		t.Errorf("completer charged %d, want %d", charged, want)
	}
	return charged
}

func invoiceOf(ctx context.Context, t *testing.T, store *postgres.Store, orderID string) order.Invoice {
	t.Helper()
	invs, err := store.Invoices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if inv.OrderID == orderID {
			return inv
		}
	}
	t.Fatalf("no invoice for %s", orderID)
	return order.Invoice{}
}

// TestSettlesSurviveAPostgresCrash is the lost settle for real: on a durable
// cluster of its own, a burst of events is reserved, charged (the gateway
// holds the charges until all are reserved) and settled in groups with
// synchronous_commit off, and Postgres is crashed (immediate shutdown: the
// WAL not yet written is gone) as soon as the last settle is acknowledged.
// After the restart some settles may be lost, or none; either way the
// redelivered events and the completer leave every invoice charged with the
// one charge the gateway made for its order.
func TestSettlesSurviveAPostgresCrash(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cluster, pool := pgtest.NewMigratedClusterWith(t, pgcluster.Options{Fsync: true})
	var sizes groupSizes
	store := postgres.NewStore(pool, postgres.WithGroups(1), sizes.option())
	stub, client := startStub(t)
	// The gateway holds every charge until the last is reserved, so each
	// must still be within its send window then: terms as the service's for
	// startStub's payment timeout, not shortAttempts, whose window a loaded
	// machine's forty reserves outlast (their charges then fail unsent).
	svc := order.NewBillingService(store, client, group, order.WithAttemptTerms(order.NewAttemptTerms(stubPaymentTimeout, 24*time.Hour)))

	const n = 40
	evts := make([]order.OrderConfirmedEvent, n)
	for i := range evts {
		evts[i] = event(t, fmt.Sprintf("ord-%02d", i))
	}
	release := stub.Hold()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, evt := range evts {
		wg.Go(func() { _, errs[i] = svc.Bill(ctx, evt) })
	}
	// Waits that follow progress, not the wall clock: on a loaded machine
	// forty goroutines reach the gateway, and then the settles, slowly.
	poll.UntilProgress(t, "every charge at the gateway", 10*time.Second, stub.Held, func() bool { return stub.Held() == n })
	// The settles queue while the first one waits on the lock, then go
	// together.
	unlock := lockInvoices(ctx, t, pool)
	release()
	settles := func() int { return sizes.sent("settle") + store.QueuedSettles() }
	poll.UntilProgress(t, "every settle sent or queued", 10*time.Second, settles, func() bool { return settles() == n })
	unlock()
	wg.Wait()
	if err := cluster.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Bill(%s) error = %v", evts[i].OrderID, err)
		}
	}
	if sizes.largest("settle") < 2 {
		t.Fatalf("settle groups %v, want a group of more than one", sizes.of("settle"))
	}
	if err := cluster.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // every connection died with the server

	invs, err := store.Invoices(ctx)
	if err != nil || len(invs) != n {
		t.Fatalf("Invoices() after the crash = %d, %v, want %d: reserves are durable", len(invs), err, n)
	}
	lost := 0
	for _, inv := range invs {
		if inv.Status == order.StatusPending {
			lost++
		}
	}
	t.Logf("settle groups %v; %d of %d invoices came back pending after the crash", sizes.of("settle"), lost, n)

	// Half the events come back; the completer finds the rest, once the
	// attempts the lost settles left alive have ended.
	for _, evt := range evts[:n/2] {
		if out, err := billUntilFinal(ctx, t, svc, evt); err != nil || (out != order.OutcomeCharged && out != order.OutcomeDuplicate) {
			t.Errorf("Bill(%s) again = %s, %v, want charged (resumed) or duplicate", evt.OrderID, out, err)
		}
	}
	c := completer.New(store, svc, completer.Options{ResumeAfter: time.Nanosecond, BatchSize: n, PassTimeout: time.Second})
	completeAll(ctx, t, store, c, -1)

	charges := map[string][]gatewaystub.Charge{}
	for _, ch := range stub.Charges() {
		charges[ch.OrderID] = append(charges[ch.OrderID], ch)
	}
	invs, err = store.Invoices(ctx)
	if err != nil || len(invs) != n {
		t.Fatalf("Invoices() = %d, %v, want %d", len(invs), err, n)
	}
	for _, inv := range invs {
		cs := charges[inv.OrderID]
		if len(cs) != 1 {
			t.Errorf("%s: %d charges at the gateway, want 1", inv.OrderID, len(cs))
			continue
		}
		if inv.Status != order.StatusCharged || inv.ChargeID != cs[0].ID || inv.EventID.String() != cs[0].Key {
			t.Errorf("%s = %+v, want charged with %s under %s", inv.OrderID, inv, cs[0].ID, cs[0].Key)
		}
	}
}
