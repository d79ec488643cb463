package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
)

// modelStore is what the model's ledger wraps: the Store, or the Store
// with its fence switched off (noFence).
type modelStore interface {
	order.Ledger
	order.PendingLedger
}

// modelLedger is the Store as the model's BillingService and completer see
// it, with what the model adds:
//   - a settle may wait, before it runs, until the model lets it go on (a
//     path whose answer came back but whose settle is slow: a GC pause, a
//     slow connection), with time passing and other paths acting meanwhile;
//   - the settles that committed since the last synchronous commit are
//     remembered with the row each one replaced, so that a lost settle can
//     put back what a Postgres crash may lose (the settle commits without
//     waiting for its WAL flush; any later synchronous commit, or the WAL
//     writer within a fraction of a second, makes it durable);
//   - a completer pass may die right after its claim committed;
//   - what the calls found is counted (the test's stats).
type modelLedger struct {
	inner modelStore
	m     *model
}

var (
	_ order.Ledger        = (*modelLedger)(nil)
	_ order.PendingLedger = (*modelLedger)(nil)
)

// lostSettle is a settle that a Postgres crash could still lose: the row as
// it was before it.
type lostSettle struct {
	orderID string
	row     json.RawMessage
	// outbox is the largest invoice_outbox id before the settle: the rows
	// after it of this order are the settle's event, lost with it (the
	// relay publishes only what is durable: Store.PublishPending).
	outbox int64
}

func (l *modelLedger) Reserve(ctx context.Context, inv order.Invoice, group string, terms order.AttemptTerms) (order.Reservation, error) {
	r, err := l.inner.Reserve(ctx, inv, group, terms)
	l.m.flushed(err)
	if err == nil && r.FirstSeen && r.Found && r.Invoice.EventID == inv.EventID && !r.Reopened {
		l.m.keyHistory(inv.OrderID, inv.EventID) // opened under its first key
	}
	if err == nil {
		switch {
		case r.Reopened:
			l.m.count("reserve: reopened under " + l.m.keyHistory(inv.OrderID, r.Invoice.EventID))
		case r.Held:
			l.m.count("reserve: held (key too old)")
		case r.Found && r.Invoice.Status == order.StatusPending && r.Attempt == 0:
			l.m.count("reserve: attempt busy")
		case r.Found && r.Invoice.Status == order.StatusPending && !r.FirstSeen:
			l.m.count("reserve: resumes a pending invoice")
		}
	}
	return r, err
}

func (l *modelLedger) TakeAttempt(ctx context.Context, orderID string, key uuid.UUID, terms order.AttemptTerms) (order.Take, error) {
	t, err := l.inner.TakeAttempt(ctx, orderID, key, terms)
	l.m.flushed(err)
	if err == nil {
		switch {
		case t.Held:
			l.m.count("take: held (key too old)")
		case t.Attempt != 0:
			l.m.count("take: taken")
		case t.Found && t.Invoice.Status == order.StatusPending && t.Invoice.EventID == key:
			l.m.count("take: attempt busy")
		default:
			l.m.count("take: no longer pending under the key")
		}
	}
	return t, err
}

func (l *modelLedger) Release(ctx context.Context, orderID string, key uuid.UUID, attempt int64, answer string) error {
	err := l.inner.Release(ctx, orderID, key, attempt, answer)
	l.m.flushed(err)
	return err
}

func (l *modelLedger) Settle(ctx context.Context, s order.Settlement) (bool, error) {
	m := l.m
	if c := callOf(ctx); c != nil && !m.waitBeforeSettle(c) {
		return false, fmt.Errorf("settle order %s: %w", s.OrderID, context.Canceled)
	}
	var (
		row        json.RawMessage
		own, alive bool
		outbox     int64
	)
	if err := m.pool.QueryRow(m.ctx, `SELECT to_jsonb(i), coalesce(attempt_id = $2, false), coalesce(attempt_until > now(), false),
		(SELECT coalesce(max(id), 0) FROM invoice_outbox)
		FROM invoice i WHERE order_id = $1`, s.OrderID, s.Attempt).Scan(&row, &own, &alive, &outbox); err != nil {
		return false, fmt.Errorf("model: the row before the settle: %w", err)
	}
	switch {
	case !own && alive:
		m.count("settle: another path's attempt alive")
	case !alive:
		m.count("settle: no attempt alive (its own expired)")
	}
	ok, err := l.inner.Settle(ctx, s)
	if err == nil {
		m.count(fmt.Sprintf("settle %s: moved %v", s.Status, ok))
	}
	if ok {
		m.mu.Lock()
		m.async = append(m.async, lostSettle{orderID: s.OrderID, row: row, outbox: outbox})
		m.mu.Unlock()
	}
	return ok, err
}

func (l *modelLedger) ClaimPending(ctx context.Context, c order.PendingClaim) ([]order.Invoice, error) {
	invs, err := l.inner.ClaimPending(ctx, c)
	l.m.flushed(err)
	if call := callOf(ctx); err == nil && call != nil && call.diesAfterClaim {
		l.m.mu.Lock()
		call.crashed = true
		l.m.notef("%s claimed %d invoices, and its process dies", call.label, len(invs))
		l.m.mu.Unlock()
		call.cancel()
	}
	return invs, err
}

func (l *modelLedger) PendingStats(ctx context.Context) (order.PendingStats, error) {
	return l.inner.PendingStats(ctx)
}

func (l *modelLedger) HoldStale(ctx context.Context, terms order.AttemptTerms) ([]string, error) {
	held, err := l.inner.HoldStale(ctx, terms)
	l.m.flushed(err)
	for range held {
		l.m.count("completer: held stale")
	}
	return held, err
}

// restoreRow puts an invoice row back, every column, as a lost settle
// leaves it, and removes the settle's outbox row, lost in the same commit.
func restoreRow(ctx context.Context, pool *pgxpool.Pool, s lostSettle) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM invoice WHERE order_id = $1`, s.orderID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM invoice_outbox WHERE order_id = $1 AND id > $2`, s.orderID, s.outbox); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO invoice SELECT * FROM jsonb_populate_record(NULL::invoice, $1)`, s.row)
		return err
	})
}

// noFence is the Store with the fence of docs/interface.md §4 switched off, as
// billing was before it (issue 22): every path that finds an invoice
// pending under a key gets to send it, whatever attempt another path holds;
// the completer sends what it claimed, whatever the invoice has become
// since; and a settle moves an invoice still pending under its key
// whatever attempt took it. Test-only: TestModelFindsRacesWithoutTheFence
// shows that the model finds the double charges of issue 22 through it.
type noFence struct {
	*postgres.Store
	pool *pgxpool.Pool

	mu      sync.Mutex
	claimed map[string]order.Invoice // order id + key → what the completer claimed
}

func newNoFence(store *postgres.Store, pool *pgxpool.Pool) *noFence {
	return &noFence{Store: store, pool: pool, claimed: map[string]order.Invoice{}}
}

// endAttempt ends whatever attempt the order's invoice records.
func (n *noFence) endAttempt(ctx context.Context, orderID string) error {
	_, err := n.pool.Exec(ctx, `UPDATE invoice SET attempt_until = NULL WHERE order_id = $1`, orderID)
	return err
}

func (n *noFence) Reserve(ctx context.Context, inv order.Invoice, group string, terms order.AttemptTerms) (order.Reservation, error) {
	if err := n.endAttempt(ctx, inv.OrderID); err != nil {
		return order.Reservation{}, err
	}
	return n.Store.Reserve(ctx, inv, group, terms)
}

func (n *noFence) TakeAttempt(ctx context.Context, orderID string, key uuid.UUID, terms order.AttemptTerms) (order.Take, error) {
	if err := n.endAttempt(ctx, orderID); err != nil {
		return order.Take{}, err
	}
	t, err := n.Store.TakeAttempt(ctx, orderID, key, terms)
	if err != nil || t.Attempt != 0 || t.Held {
		return t, err
	}
	n.mu.Lock()
	inv, ok := n.claimed[orderID+key.String()]
	n.mu.Unlock()
	if !ok {
		return t, nil
	}
	// Before the fence the completer charged the invoice it had claimed,
	// from its snapshot.
	return order.Take{Invoice: inv, Found: true, Attempt: 1}, nil
}

func (n *noFence) Settle(ctx context.Context, s order.Settlement) (bool, error) {
	if err := n.pool.QueryRow(ctx, `SELECT coalesce(attempt_id, 0) FROM invoice WHERE order_id = $1`, s.OrderID).Scan(&s.Attempt); err != nil {
		return false, err
	}
	return n.Store.Settle(ctx, s)
}

func (n *noFence) ClaimPending(ctx context.Context, c order.PendingClaim) ([]order.Invoice, error) {
	invs, err := n.Store.ClaimPending(ctx, c)
	n.mu.Lock()
	for _, inv := range invs {
		n.claimed[inv.OrderID+inv.EventID.String()] = inv
	}
	n.mu.Unlock()
	return invs, err
}
