package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/poll"
)

// Tests of what happens when a record of a held or rejected order meets
// another actor: a crash, a lost commit, another path's settle.

// commitLost is a ledger whose settles commit but report the connection
// lost during COMMIT (a failover): the caller sees an outage and handles
// the record again.
type commitLost struct{ *postgres.Store }

func (c commitLost) Settle(ctx context.Context, s order.Settlement) (bool, error) {
	if _, err := c.Store.Settle(ctx, s); err != nil {
		return false, err
	}
	return false, &order.OutageError{Dependency: order.DependencyPostgres, Err: errors.New("connection lost during COMMIT")}
}

// TestHeldRecordRedeliveredGoesToTheDLQ: a record that held its order (422),
// or a new record of a held order, is handled again before its DLQ write was
// acknowledged (the process died; or the hold's commit was reported lost
// and the consumer paused). The record must reach the DLQ on that second
// delivery: counted a duplicate, it would be nowhere for a person's replay
// after `billing invoice resolve --rejected`.
func TestHeldRecordRedeliveredGoesToTheDLQ(t *testing.T) {
	t.Parallel()
	keyReused := func(int, order.ChargeRequest) (order.ChargeResult, error) {
		return order.ChargeResult{}, refused(order.RefusalKeyReused, 422)
	}
	toDLQ := func(t *testing.T, what string, err error) {
		t.Helper()
		if _, ok := errors.AsType[*order.HeldError](err); !ok || order.Classify(err) != order.ClassPermanent {
			t.Errorf("%s: error = %v, want a HeldError (the record to the DLQ)", what, err)
		}
	}
	t.Run("the process died before the DLQ write", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		e := newBillingEnv(t)
		e.gw.SetAnswer(keyReused)
		e1, e2 := event(t, "ord-1"), event(t, "ord-1")
		_, err := e.svc.Bill(ctx, e1)
		toDLQ(t, "E1, the 422", err)
		_, err = e.svc.Bill(ctx, e1)
		toDLQ(t, "E1 delivered again", err)
		_, err = e.svc.Bill(ctx, e2)
		toDLQ(t, "E2, new, of the held order", err)
		_, err = e.svc.Bill(ctx, e2)
		toDLQ(t, "E2 delivered again", err)
		if n := len(e.gw.Keys()); n != 1 {
			t.Errorf("gateway calls = %d, want 1: a held key is never sent again", n)
		}
	})
	t.Run("the hold's commit was reported lost", func(t *testing.T) {
		t.Parallel()
		ctx := testCtx(t)
		e := newBillingEnv(t)
		e.gw.SetAnswer(keyReused)
		evt := event(t, "ord-1")
		flaky := order.NewBillingService(commitLost{e.store}, e.gw, group)
		_, err := flaky.Bill(ctx, evt)
		if order.Classify(err) != order.ClassOutage {
			t.Fatalf("first delivery: error = %v, want an outage (the consumer pauses and handles it again)", err)
		}
		_, err = e.svc.Bill(ctx, evt)
		toDLQ(t, "after the outage", err)
		if inv := e.invoice(ctx, t, "ord-1"); inv.Status != order.StatusHeld {
			t.Errorf("invoice = %s, want held", inv.Status)
		}
	})
}

// TestEventRacingARejectionReopensIt: another path (a tier retry, the
// completer, another pod) settles the order's invoice rejected while an
// event that reopens a rejected invoice is being reserved: the reserve's
// statement sees the invoice pending, its read after it sees it rejected.
// The event must still reopen and charge it, not end as a duplicate with
// its offset committed. Two such events: one first seen, and the replay of
// an earlier record of the order (seen, for this order, not the invoice's
// key).
func TestEventRacingARejectionReopensIt(t *testing.T) {
	t.Parallel()
	for _, replay := range []bool{false, true} {
		name := "a new event"
		if replay {
			name = "the replay of an earlier record of the order"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			e := newBillingEnv(t)
			var racer order.OrderConfirmedEvent
			if replay {
				// E0 rejected; E1 reopens the invoice under its own key,
				// pending: E0 is seen, for this order, and not the key.
				e0 := event(t, "ord-1")
				e.gw.SetAnswer(func(n int, _ order.ChargeRequest) (order.ChargeResult, error) {
					return order.ChargeResult{}, refused(order.RefusalRejected, 404)
				})
				if _, err := e.svc.Bill(ctx, e0); order.Classify(err) != order.ClassPermanent {
					t.Fatalf("E0: error = %v, want the 404's permanent error", err)
				}
				e.gw.SetAnswer(nil)
				racer = e0
			} else {
				racer = event(t, "ord-1")
			}
			e1 := event(t, "ord-1")
			if _, err := e.store.Reserve(ctx, pendingInvoice("ord-1", e1.EventID), group, terms); err != nil {
				t.Fatal(err)
			}
			if inv := e.invoice(ctx, t, "ord-1"); inv.Status != order.StatusPending || inv.EventID != e1.EventID {
				t.Fatalf("invoice = %s under %s, want pending under E1", inv.Status, inv.EventID)
			}

			// The other path's rejection, not yet committed.
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := tx.Exec(ctx, `UPDATE invoice SET status = 'rejected', reason = 'gateway 404', attempt_until = NULL WHERE order_id = 'ord-1'`); err != nil {
				t.Fatal(err)
			}
			type result struct {
				out order.Outcome
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := e.svc.Bill(ctx, racer)
				done <- result{out, err}
			}()
			poll.Until(t, "the reserve waiting for the rejection's row lock", 10*time.Second, func() bool {
				var n int
				err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
				return err == nil && n > 0
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.out != order.OutcomeCharged {
				t.Errorf("Bill(the racing event) = %q, %v; want charged: it reopens a rejected invoice", r.out, r.err)
			}
			inv := e.invoice(ctx, t, "ord-1")
			if inv.Status != order.StatusCharged || inv.EventID != racer.EventID {
				t.Errorf("invoice = %s under %s, want charged under the racing event's id %s", inv.Status, inv.EventID, racer.EventID)
			}
			keys := e.gw.Keys()
			if len(keys) == 0 || keys[len(keys)-1] != racer.EventID {
				t.Errorf("gateway keys = %v, want the last under the racing event's id", keys)
			}
		})
	}
}
