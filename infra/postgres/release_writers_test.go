package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// pod100 is a process of release 1.0.0 (8072a37), as Postgres and the
// gateway see it: its reserve, charge and settle of one event, with its
// own statements (release100_test.go) and the rules of its
// BillingService.Bill and Resume (git show 8072a37:core/order/billing.go):
// it takes no attempt, settles whatever the settle's row count, and
// dead-letters a refused event whatever its settle did.
type pod100 struct {
	pool *pgxpool.Pool
	gw   order.PaymentGateway
}

// reserve is 1.0.0's reserve pipeline for one event.
func (p pod100) reserve(ctx context.Context, evt order.OrderConfirmedEvent) (firstSeen bool, inv order.Invoice, found bool, err error) {
	b := &pgx.Batch{}
	b.Queue(v100SQLReserveOne, evt.OrderID, evt.EventID, evt.CustomerID, evt.TotalAmount, evt.Currency, group).
		QueryRow(func(row pgx.Row) error {
			var reopened bool
			return row.Scan(&firstSeen, &reopened)
		})
	b.Queue(v100SQLInvoicesForUpdate, []string{evt.OrderID}).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				key    pgtype.UUID
				status string
			)
			if err := rows.Scan(&inv.OrderID, &key, &inv.CustomerID, &inv.Amount, &inv.Currency, &status, &inv.ChargeID, &inv.CreatedAt); err != nil {
				return err
			}
			inv.EventID, inv.Status, found = uuid.UUID(key.Bytes), order.InvoiceStatus(status), true
		}
		return rows.Err()
	})
	err = p.pool.SendBatch(ctx, b).Close()
	return firstSeen, inv, found, err
}

// settle is 1.0.0's settle of one invoice; it reports whether it moved it.
func (p pod100) settle(ctx context.Context, orderID string, key uuid.UUID, status order.InvoiceStatus, chargeID string) (bool, error) {
	b := &pgx.Batch{}
	var tag pgconn.CommandTag
	b.Queue(v100SQLSettlePrelude)
	b.Queue(v100SQLSettleOne, orderID, key, string(status), chargeID).Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	err := p.pool.SendBatch(ctx, b).Close()
	return tag.RowsAffected() == 1, err
}

// bill is 1.0.0's Bill of one event.
func (p pod100) bill(ctx context.Context, evt order.OrderConfirmedEvent) (order.Outcome, error) {
	firstSeen, inv, found, err := p.reserve(ctx, evt)
	switch {
	case err != nil:
		return "", fmt.Errorf("1.0.0 reserve: %w", err)
	case !found:
		return order.OutcomeDuplicate, nil
	case inv.Status == order.StatusPending:
		return p.resume(ctx, inv)
	case !firstSeen:
		return order.OutcomeDuplicate, nil
	}
	return order.OutcomeDuplicateOrder, nil
}

// resume is 1.0.0's Resume: the key sent with no attempt taken.
func (p pod100) resume(ctx context.Context, inv order.Invoice) (order.Outcome, error) {
	res, err := p.gw.Charge(ctx, order.ChargeRequest{IdempotencyKey: inv.EventID, OrderID: inv.OrderID, CustomerID: inv.CustomerID,
		Amount: order.Money{Amount: inv.Amount, Currency: inv.Currency}})
	if err != nil {
		if refused, ok := errors.AsType[*order.ChargeRefusedError](err); ok && refused.Kind == order.RefusalRejected {
			if _, serr := p.settle(ctx, inv.OrderID, inv.EventID, order.StatusRejected, ""); serr != nil {
				return "", fmt.Errorf("1.0.0 settle rejected: %w (after: %w)", serr, err)
			}
		}
		return "", err
	}
	status, outcome := order.StatusCharged, order.OutcomeCharged
	if res.Status == order.ChargeDeclined {
		status, outcome = order.StatusDeclined, order.OutcomeDeclined
	}
	if _, err := p.settle(ctx, inv.OrderID, inv.EventID, status, res.ChargeID); err != nil {
		return "", fmt.Errorf("1.0.0 settle: %w", err)
	}
	return outcome, nil
}

// claim is 1.0.0's pending completer claiming the invoices pending longer
// than olderThan.
func (p pod100) claim(ctx context.Context, olderThan time.Duration) (int, error) {
	tag, err := p.pool.Exec(ctx, v100SQLClaimPending, olderThan.Seconds(), 100, 1.0, 60.0)
	return int(tag.RowsAffected()), err
}

// setLegacyLife makes an attempt of a release that records none last d in
// pool's database (migration 0006's invoice_legacy_attempt_life), for tests
// that need such attempts to have ended at once.
func setLegacyLife(ctx context.Context, t *testing.T, pool *pgxpool.Pool, d time.Duration) {
	t.Helper()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION invoice_legacy_attempt_life() RETURNS interval
		LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT make_interval(secs => %f) $$`, d.Seconds())); err != nil {
		t.Fatal(err)
	}
}

// outboxRow is an invoice event waiting in the outbox.
type outboxRow struct {
	EventID uuid.UUID
	OrderID string
	Status  order.InvoiceStatus
	Key     uuid.UUID
	Reason  string
}

// outboxOf returns orderID's waiting invoice events, oldest first.
func outboxOf(ctx context.Context, t *testing.T, pool *pgxpool.Pool, orderID string) []outboxRow {
	t.Helper()
	rows, _ := pool.Query(ctx, `SELECT event_id, order_id, status, idempotency_key, coalesce(reason, '')
		FROM invoice_outbox WHERE order_id = $1 ORDER BY id`, orderID)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var (
			r       outboxRow
			id, key pgtype.UUID
			status  string
		)
		err := row.Scan(&id, &r.OrderID, &status, &key, &r.Reason)
		r.EventID, r.Key, r.Status = uuid.UUID(id.Bytes), uuid.UUID(key.Bytes), order.InvoiceStatus(status)
		return r, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantEvents checks orderID's outbox against the transitions want, each a
// key, a status and the reopens before it, published once with its §9 id.
func wantEvents(ctx context.Context, t *testing.T, pool *pgxpool.Pool, orderID string, want ...transition) {
	t.Helper()
	got := outboxOf(ctx, t, pool, orderID)
	if len(got) != len(want) {
		t.Fatalf("%s's invoice events = %+v, want %d: %+v", orderID, got, len(want), want)
	}
	for i, w := range want {
		id := order.InvoiceEventID(orderID, w.key, w.status, w.reopens)
		if g := got[i]; g.EventID != id || g.Status != w.status || g.Key != w.key {
			t.Errorf("%s's event %d = %+v, want %s under %s (reopens %d) with id %s", orderID, i, g, w.status, w.key, w.reopens, id)
		}
	}
}

// transition is one an invoice made: the key, the status reached, and how
// many times it had gone back to pending before.
type transition struct {
	key     uuid.UUID
	status  order.InvoiceStatus
	reopens int
}

// attemptOf returns the attempt orderID's invoice records and whether it is
// alive.
func attemptOf(ctx context.Context, t *testing.T, pool *pgxpool.Pool, orderID string) (id int64, alive bool) {
	t.Helper()
	if err := pool.QueryRow(ctx, `SELECT coalesce(attempt_id, 0), coalesce(attempt_until > now(), false) FROM invoice WHERE order_id = $1`,
		orderID).Scan(&id, &alive); err != nil {
		t.Fatal(err)
	}
	return id, alive
}

// TestRelease100TransitionsArePublished: beside this release, every
// transition 1.0.0 makes is published once with its §9 id, the
// intermediate ones too (a rejection later reopened); its reopen counts in
// reopens, and every invoice whose key it sent has key_sent_at. A
// transition it made before migration 0006 is history: not published.
func TestRelease100TransitionsArePublished(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	stub, client := startStub(t)
	old := pod100{pool: pool, gw: client}

	// Before 0006: 1.1.0's schema, as a database 1.1.0 migrated.
	if err := postgres.MigrateFS(ctx, pool, migrationSet(t, "0005_invoice_outbox", nil)); err != nil {
		t.Fatal(err)
	}
	before := event(t, "ord-before")
	if out, err := old.bill(ctx, before); err != nil || out != order.OutcomeCharged {
		t.Fatalf("1.0.0 bill before 0006 = %s, %v, want charged", out, err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	// 1.0.0's own attempts end at once here: its rejection is applied
	// (TestRelease100KeepsTheFence covers a live one).
	setLegacyLife(ctx, t, pool, 0)

	e1 := event(t, "ord-1")
	stop := refuseKey(stub, e1.EventID, http.StatusNotFound)
	if _, err := old.bill(ctx, e1); order.Classify(err) != order.ClassPermanent {
		t.Fatalf("1.0.0 bill of a refused key: error = %v, want permanent (404)", err)
	}
	stop()
	e2 := event(t, "ord-1")
	if out, err := old.bill(ctx, e2); err != nil || out != order.OutcomeCharged {
		t.Fatalf("1.0.0 bill of the order's next event = %s, %v, want charged (reopened)", out, err)
	}
	store := postgres.NewStore(pool)
	inv := invoiceOf(ctx, t, store, "ord-1")
	if inv.Status != order.StatusCharged || inv.EventID != e2.EventID || inv.Reopens != 1 || inv.KeySentAt.IsZero() {
		t.Errorf("1.0.0's reopened invoice = %+v, want charged under the second key, reopens 1, key_sent_at set", inv)
	}
	wantEvents(ctx, t, pool, "ord-1",
		transition{e1.EventID, order.StatusRejected, 0},
		transition{e2.EventID, order.StatusCharged, 1})
	if got := outboxOf(ctx, t, pool, "ord-1"); len(got) > 0 && got[0].Reason == "" {
		t.Errorf("1.0.0's rejection published without a reason: %+v", got[0])
	}

	d := event(t, "ord-declined")
	stub.SetFault(nil)
	declineKey(stub, d.EventID)
	if out, err := old.bill(ctx, d); err != nil || out != order.OutcomeDeclined {
		t.Fatalf("1.0.0 bill of a declined card = %s, %v", out, err)
	}
	wantEvents(ctx, t, pool, "ord-declined", transition{d.EventID, order.StatusDeclined, 0})
	if inv := invoiceOf(ctx, t, store, "ord-declined"); inv.KeySentAt.IsZero() {
		t.Errorf("1.0.0's declined invoice has no key_sent_at: %+v", inv)
	}
	wantEvents(ctx, t, pool, "ord-before")

	// Published by the relay like any other event, and once.
	p := &recordingPublisher{}
	publishAll(ctx, t, store, p)
	if n := len(p.published()); n != 3 {
		t.Errorf("relay published %d events, want 3: %+v", n, p.published())
	}
}

// declineKey makes the stub decline every request under key (402).
func declineKey(stub *gatewaystub.Stub, key uuid.UUID) {
	stub.SetFault(func(c gatewaystub.Call, _ int) gatewaystub.Fault {
		if c.Key == key.String() {
			return gatewaystub.Fault{Status: http.StatusPaymentRequired}
		}
		return gatewaystub.Fault{}
	})
}

// TestRelease100KeepsTheFence: the writes of 1.0.0, which knows no
// attempts, keep the fence of this release (migration 0006): what it would
// send counts as an attempt of the longest life any configuration allows,
// and its moves out of pending that could let a second key follow wait
// for every attempt under the first to end.
func TestRelease100KeepsTheFence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	store := postgres.NewStore(pool, postgres.WithEvents(true))
	_, client := startStub(t)
	old := pod100{pool: pool, gw: client}
	const legacyLife = 65 * time.Second

	t.Run("its rejection and settle wait for this release's attempt", func(t *testing.T) {
		e := event(t, "ord-fenced")
		r, err := store.Reserve(ctx, pendingInvoice(e.OrderID, e.EventID), group, terms)
		if err != nil || r.Attempt == 0 {
			t.Fatalf("Reserve() = %+v, %v, want the attempt", r, err)
		}
		for _, st := range []order.InvoiceStatus{order.StatusRejected, order.StatusCharged} {
			if moved, err := old.settle(ctx, e.OrderID, e.EventID, st, ""); err != nil || moved {
				t.Errorf("1.0.0 settle %s while this release's attempt is alive = %v, %v, want not applied", st, moved, err)
			}
		}
		if id, alive := attemptOf(ctx, t, pool, e.OrderID); id != r.Attempt || !alive {
			t.Errorf("attempt after 1.0.0's settles = %d (alive %v), want %d alive", id, alive, r.Attempt)
		}
		if ok, err := store.Settle(ctx, order.Settlement{OrderID: e.OrderID, Key: e.EventID, Attempt: r.Attempt, Status: order.StatusCharged, ChargeID: "ch"}); err != nil || !ok {
			t.Fatalf("this release's settle = %v, %v, want applied", ok, err)
		}
		wantEvents(ctx, t, pool, e.OrderID, transition{e.EventID, order.StatusCharged, 0})
	})

	t.Run("its insert is an attempt; its own charge settles, its rejection waits", func(t *testing.T) {
		for _, st := range []order.InvoiceStatus{order.StatusCharged, order.StatusRejected} {
			e := event(t, "ord-own-"+string(st))
			if _, _, found, err := old.reserve(ctx, e); err != nil || !found {
				t.Fatalf("1.0.0 reserve = %v, %v", found, err)
			}
			if id, alive := attemptOf(ctx, t, pool, e.OrderID); id != -1 || !alive {
				t.Errorf("after 1.0.0's insert, attempt = %d (alive %v), want -1 alive", id, alive)
			}
			r, err := store.Reserve(ctx, pendingInvoice(e.OrderID, e.EventID), group, terms)
			if err != nil || r.Attempt != 0 || r.Wait < legacyLife-5*time.Second {
				t.Errorf("this release's reserve beside 1.0.0's attempt = %+v, %v, want no attempt and a wait of about %v", r, err, legacyLife)
			}
			moved, err := old.settle(ctx, e.OrderID, e.EventID, st, "ch")
			if want := st == order.StatusCharged; err != nil || moved != want {
				t.Errorf("1.0.0 settle %s of its own invoice = %v, %v, want applied %v", st, moved, err, want)
			}
		}
		if inv := invoiceOf(ctx, t, store, "ord-own-rejected"); inv.Status != order.StatusPending || inv.KeySentAt.IsZero() {
			t.Errorf("1.0.0's refused invoice = %+v, want pending with key_sent_at", inv)
		}
	})

	t.Run("its redelivery and its new event take this release's attempt over", func(t *testing.T) {
		for _, redeliver := range []bool{true, false} {
			e := event(t, fmt.Sprintf("ord-over-%v", redeliver))
			r, err := store.Reserve(ctx, pendingInvoice(e.OrderID, e.EventID), group, terms)
			if err != nil || r.Attempt == 0 {
				t.Fatalf("Reserve() = %+v, %v", r, err)
			}
			next := e
			if !redeliver {
				next = event(t, e.OrderID)
			}
			if _, inv, found, err := old.reserve(ctx, next); err != nil || !found || inv.Status != order.StatusPending || inv.EventID != e.EventID {
				t.Fatalf("1.0.0 reserve = %+v, %v, %v, want the pending invoice under the first key", inv, found, err)
			}
			if id, alive := attemptOf(ctx, t, pool, e.OrderID); id != -1 || !alive {
				t.Errorf("redelivered %v: attempt after 1.0.0's reserve = %d (alive %v), want -1 alive", redeliver, id, alive)
			}
			if ok, err := store.Settle(ctx, order.Settlement{OrderID: e.OrderID, Key: e.EventID, Attempt: r.Attempt, Status: order.StatusRejected}); err != nil || ok {
				t.Errorf("redelivered %v: this release's rejection while 1.0.0 may send the key = %v, %v, want not applied", redeliver, ok, err)
			}
		}
	})

	t.Run("its completer's claim is an attempt", func(t *testing.T) {
		e := event(t, "ord-claimed")
		if _, err := store.Reserve(ctx, pendingInvoice(e.OrderID, e.EventID), group, ended); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE invoice SET updated_at = now() - interval '1 hour', written_xact = pg_current_xact_id() WHERE order_id = $1`, e.OrderID); err != nil {
			t.Fatal(err)
		}
		if n, err := old.claim(ctx, time.Minute); err != nil || n != 1 {
			t.Fatalf("1.0.0 claim = %d, %v, want 1", n, err)
		}
		if id, alive := attemptOf(ctx, t, pool, e.OrderID); id != -1 || !alive {
			t.Errorf("after 1.0.0's claim, attempt = %d (alive %v), want -1 alive", id, alive)
		}
	})

	t.Run("no second key while an attempt under the first may be in flight", func(t *testing.T) {
		e := event(t, "ord-reopen")
		if _, err := store.Reserve(ctx, pendingInvoice(e.OrderID, e.EventID), group, terms); err != nil {
			t.Fatal(err)
		}
		// A rejected invoice with an attempt alive: what no writer leaves
		// behind today, and what each reopen must still refuse.
		if _, err := pool.Exec(ctx, `UPDATE invoice SET status = 'rejected', attempt_id = -1, attempt_until = now() + interval '1 minute',
			written_xact = pg_current_xact_id() WHERE order_id = $1`, e.OrderID); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := old.reserve(ctx, event(t, e.OrderID))
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "40001" {
			t.Errorf("1.0.0's reopen while an attempt may be in flight: error = %v, want a serialization failure (it retries)", err)
		}
		svc := order.NewBillingService(store, client, group)
		if _, err := svc.Bill(ctx, event(t, e.OrderID)); !errors.As(err, new(*order.AttemptBusyError)) {
			t.Errorf("this release's reopen while an attempt may be in flight: error = %v, want it to wait (AttemptBusyError)", err)
		}
		if inv := invoiceOf(ctx, t, store, e.OrderID); inv.Status != order.StatusRejected || inv.EventID != e.EventID {
			t.Errorf("invoice = %+v, want still rejected under the first key", inv)
		}
	})
}

// TestRollingUpdateChargesOnce is issue 29's point 1, driven step by step:
// 1.0.0 (its statements) and this release (its store and billing service)
// share one database and one order, and the gateway holds K1's request
// until the order's next event has been billed. On 1.1.0's schema the
// order is charged twice: one pod decides the invoice (a 404 that stored
// nothing) while the other's request under K1 is in flight, the next event
// reopens it under K2 and is charged, and K1 lands. Here it is charged
// once: the decision waits for every attempt under K1, and the next event
// with it.
func TestRollingUpdateChargesOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// oldInFlight: 1.0.0's request under K1 is the one held, and this
		// release's is refused; else the other way round.
		oldInFlight bool
	}{
		{"1.0.0 rejects while this release's request is in flight", false},
		{"this release is refused while 1.0.0's request is in flight", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool, _ := pgtest.NewDB(t)
			store := postgres.NewStore(pool, postgres.WithEvents(true))
			stub, client := startStub(t)
			newGW, oldGW := newGatedGateway(client), newGatedGateway(client)
			svc := order.NewBillingService(store, newGW, group)
			old := pod100{pool: pool, gw: oldGW}
			e1 := event(t, "ord-roll")
			type billed struct {
				out order.Outcome
				err error
			}

			// A pod of this release takes K1's attempt; its request is
			// held on the way.
			openNew := newGW.gate(e1.EventID)
			defer openNew()
			first := make(chan billed, 1)
			go func() {
				out, err := svc.Bill(ctx, e1)
				first <- billed{out, err}
			}()
			newGW.waitEntered(t, e1.EventID)

			// A rebalance gives E1 to a 1.0.0 pod too, which sends K1.
			openOld := func() {}
			oldDone := make(chan billed, 1)
			if tc.oldInFlight {
				openOld = oldGW.gate(e1.EventID)
				defer openOld()
				go func() {
					out, err := old.bill(ctx, e1)
					oldDone <- billed{out, err}
				}()
				oldGW.waitEntered(t, e1.EventID)
				// This release's request reaches the gateway first and
				// is refused, storing nothing.
				stop := refuseKey(stub, e1.EventID, http.StatusNotFound)
				openNew()
				r := <-first
				t.Logf("this release's E1, refused: %s, %v", r.out, r.err)
				stop()
			} else {
				stop := refuseKey(stub, e1.EventID, http.StatusNotFound)
				out, err := old.bill(ctx, e1)
				t.Logf("1.0.0's E1, refused: %s, %v", out, err)
				stop()
			}

			// The order's next event reaches a pod of this release.
			e2 := event(t, "ord-roll")
			out2, err2 := svc.Bill(ctx, e2)
			t.Logf("E2 while K1 is in flight: %s, %v", out2, err2)

			// K1's held request lands.
			if tc.oldInFlight {
				openOld()
				r := <-oldDone
				t.Logf("1.0.0's E1, landed: %s, %v", r.out, r.err)
			} else {
				openNew()
				r := <-first
				t.Logf("this release's E1, landed: %s, %v", r.out, r.err)
			}
			// Whatever waited runs to its end on a pod of this release.
			if err2 != nil {
				out2, err2 = billUntilFinal(ctx, t, svc, e2)
				t.Logf("E2 at its end: %s, %v", out2, err2)
			}

			wantOneCharge(t, stub, e1.OrderID)
			inv := invoiceOf(ctx, t, store, e1.OrderID)
			if inv.Status != order.StatusCharged || inv.EventID != e1.EventID {
				t.Errorf("invoice = %+v, want charged under K1", inv)
			}
			wantEvents(ctx, t, pool, e1.OrderID, transition{e1.EventID, order.StatusCharged, 0})
		})
	}
}
