package ledgertest

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// Mem is order.Ledger, order.Outbox and order.PendingLedger in memory, with
// the rules of infra/postgres's Store: Run, RunOutbox and RunPending check
// both against the same tables. core/order's tests read the billing rules,
// the relay and the completer over it, and the model test compares the two.
type Mem struct {
	mu       sync.Mutex
	now      func() time.Time
	dedup    map[string]string // event id / group → the order it was first seen with
	invoices map[string]*memInvoice
	outbox   []*memEvent // in the order the transitions wrote them
	lastID   int64       // of the last event written
}

type memInvoice struct {
	inv     order.Invoice
	attempt int64     // the last attempt taken; 0: none
	until   time.Time // when it ends; zero: ended
	// updated is when the invoice's current key started, or it left
	// pending: the completer's and the gauges' clock (the Store's
	// updated_at).
	updated time.Time
	// claims counts the completer's claims since the key started, and
	// due is when the last one's back-off ends (zero: due).
	claims int
	due    time.Time
}

// memEvent is a row of the outbox; claimed while a PublishPending holds it.
type memEvent struct {
	id      int64
	e       order.InvoiceEvent
	claimed bool
}

var (
	_ order.Ledger        = (*Mem)(nil)
	_ order.Outbox        = (*Mem)(nil)
	_ order.PendingLedger = (*Mem)(nil)
)

// NewMem returns an empty in-memory ledger on the wall clock.
func NewMem() *Mem { return NewMemOn(time.Now) }

// NewMemOn returns an empty in-memory ledger on clock, for a test that
// moves time itself (a pending invoice's age, an attempt's end).
func NewMemOn(clock func() time.Time) *Mem {
	return &Mem{now: clock, dedup: map[string]string{}, invoices: map[string]*memInvoice{}}
}

// Invoice returns orderID's invoice, if it has one.
func (l *Mem) Invoice(orderID string) (order.Invoice, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.invoices[orderID]
	if !ok {
		return order.Invoice{}, false
	}
	return m.inv, true
}

// keyHeld reports whether an invoice of another order than orderID holds key.
func (l *Mem) keyHeld(key uuid.UUID, orderID string) bool {
	for _, m := range l.invoices {
		if m.inv.EventID == key && m.inv.OrderID != orderID {
			return true
		}
	}
	return false
}

// free reports whether no attempt of m is alive at now.
func (m *memInvoice) free(now time.Time) bool { return !m.until.After(now) }

// aged reports whether m's key was first sent terms.HoldAfter or longer ago.
func (m *memInvoice) aged(now time.Time, terms order.AttemptTerms) bool {
	return terms.HoldAfter > 0 && !m.inv.KeySentAt.IsZero() && !m.inv.KeySentAt.After(now.Add(-terms.HoldAfter))
}

// takeOrHold takes m's attempt for attempt, or holds m, as the Store does
// for an invoice pending under its key with no attempt alive.
func (l *Mem) takeOrHold(m *memInvoice, now time.Time, terms order.AttemptTerms, attempt int64) (held bool) {
	if m.aged(now, terms) {
		l.hold(m, now)
		return true
	}
	m.attempt, m.until = attempt, now.Add(terms.Life)
	if m.inv.KeySentAt.IsZero() {
		m.inv.KeySentAt = now
	}
	return false
}

// hold holds m, its key too old to send, and writes its InvoiceHeld.
func (l *Mem) hold(m *memInvoice, now time.Time) {
	m.inv.Status, m.inv.Reason, m.until, m.updated = order.StatusHeld, order.ReasonKeyAged, time.Time{}, now
	l.publish(m, now)
}

// publish writes the event of m's transition into its status to the
// outbox, as the Store's transitions do in their own statement: once per
// event id among the waiting events.
func (l *Mem) publish(m *memInvoice, now time.Time) {
	e := order.InvoiceEvent{
		EventID: order.InvoiceEventID(m.inv.OrderID, m.inv.EventID, m.inv.Status, m.inv.Reopens),
		Status:  m.inv.Status, OccurredAt: now, OrderID: m.inv.OrderID, CustomerID: m.inv.CustomerID,
		Amount: m.inv.Amount, Currency: m.inv.Currency, IdempotencyKey: m.inv.EventID, ChargeID: m.inv.ChargeID,
		Reason: m.inv.Reason,
	}
	for _, w := range l.outbox {
		if w.e.EventID == e.EventID {
			return
		}
	}
	l.lastID++
	l.outbox = append(l.outbox, &memEvent{id: l.lastID, e: e})
}

// newAttempt returns a random attempt id, never 0.
func newAttempt() int64 {
	for {
		if id := rand.Int64(); id != 0 {
			return id
		}
	}
}

// Reserve implements order.Ledger.
func (l *Mem) Reserve(_ context.Context, inv order.Invoice, group string, terms order.AttemptTerms) (order.Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, attempt := l.now(), newAttempt()
	var r order.Reservation
	k := inv.EventID.String() + "/" + group
	firstOrder, seen := l.dedup[k]
	r.FirstSeen = !seen
	if !seen {
		l.dedup[k] = inv.OrderID
	}
	m, ok := l.invoices[inv.OrderID]
	switch {
	case !ok:
		if r.FirstSeen && !l.keyHeld(inv.EventID, "") {
			inv.Status, inv.ChargeID, inv.Reason, inv.CreatedAt, inv.KeySentAt, inv.Reopens = order.StatusPending, "", "", now, now, 0
			l.invoices[inv.OrderID] = &memInvoice{inv: inv, attempt: attempt, until: now.Add(terms.Life), updated: now}
		}
	case m.inv.Status == order.StatusRejected &&
		(r.FirstSeen || m.inv.EventID == inv.EventID || firstOrder == inv.OrderID) && !l.keyHeld(inv.EventID, inv.OrderID):
		m.inv.EventID, m.inv.CustomerID, m.inv.Amount, m.inv.Currency = inv.EventID, inv.CustomerID, inv.Amount, inv.Currency
		m.inv.Status, m.inv.ChargeID, m.inv.Reason, m.inv.KeySentAt = order.StatusPending, "", "", now
		m.inv.Reopens++
		m.attempt, m.until, m.updated, m.claims, m.due = attempt, now.Add(terms.Life), now, 0, time.Time{}
		r.Reopened = true
	case m.inv.Status == order.StatusPending && m.free(now):
		r.Held = l.takeOrHold(m, now, terms, attempt)
	}
	if m, ok = l.invoices[inv.OrderID]; ok {
		r.Invoice, r.Found = m.inv, true
		if m.inv.Status == order.StatusPending {
			if m.attempt == attempt {
				r.Attempt = attempt
			} else {
				r.Wait = max(m.until.Sub(now), 0)
			}
		}
	}
	return r, nil
}

// TakeAttempt implements order.Ledger.
func (l *Mem) TakeAttempt(_ context.Context, orderID string, key uuid.UUID, terms order.AttemptTerms) (order.Take, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, attempt := l.now(), newAttempt()
	var t order.Take
	m, ok := l.invoices[orderID]
	if !ok {
		return t, nil
	}
	if m.inv.Status == order.StatusPending && m.inv.EventID == key && m.free(now) {
		t.Held = l.takeOrHold(m, now, terms, attempt)
	}
	t.Invoice, t.Found = m.inv, true
	if m.inv.Status == order.StatusPending && m.inv.EventID == key {
		if m.attempt == attempt {
			t.Attempt = attempt
		} else {
			t.Wait = max(m.until.Sub(now), 0)
		}
	}
	return t, nil
}

// Settle implements order.Ledger.
func (l *Mem) Settle(_ context.Context, s order.Settlement) (bool, error) {
	if !s.Status.Final() {
		return false, fmt.Errorf("settle invoice %s to %q: status is not final", s.OrderID, s.Status)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	m, ok := l.invoices[s.OrderID]
	if !ok || m.inv.Status != order.StatusPending || m.inv.EventID != s.Key || (m.attempt != s.Attempt && !m.free(now)) {
		return false, nil
	}
	m.inv.Status, m.inv.ChargeID, m.inv.Reason, m.until, m.updated = s.Status, s.ChargeID, s.Reason, time.Time{}, now
	l.publish(m, now)
	return true, nil
}

// Release implements order.Ledger.
func (l *Mem) Release(_ context.Context, orderID string, key uuid.UUID, attempt int64, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m, ok := l.invoices[orderID]; ok && m.inv.Status == order.StatusPending && m.inv.EventID == key && m.attempt == attempt {
		m.until = time.Time{}
	}
	return nil
}

// PublishPending implements order.Outbox as the Store does: it claims up
// to limit events that no other call holds, the oldest waiting event of
// each order only, calls publish with them outside the lock (a concurrent
// call skips them, as SKIP LOCKED does), and removes them when publish
// returns nil.
func (l *Mem) PublishPending(ctx context.Context, limit int, publish func(ctx context.Context, events []order.InvoiceEvent) error) (int, error) {
	l.mu.Lock()
	var (
		claimed []*memEvent
		seen    = map[string]bool{} // orders with an earlier event, claimed or not
	)
	for _, w := range l.outbox {
		first := !seen[w.e.OrderID]
		seen[w.e.OrderID] = true
		if first && !w.claimed && len(claimed) < limit {
			w.claimed = true
			claimed = append(claimed, w)
		}
	}
	l.mu.Unlock()
	if len(claimed) == 0 {
		return 0, nil
	}
	events := make([]order.InvoiceEvent, len(claimed))
	for i, w := range claimed {
		events[i] = w.e
	}
	err := publish(ctx, events)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range claimed {
		w.claimed = false
	}
	if err != nil {
		return 0, fmt.Errorf("publish the outbox: %w", err)
	}
	l.outbox = slices.DeleteFunc(l.outbox, func(w *memEvent) bool { return slices.Contains(claimed, w) })
	return len(claimed), nil
}

// OutboxStats implements order.Outbox.
func (l *Mem) OutboxStats(context.Context) (order.OutboxStats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := order.OutboxStats{Pending: len(l.outbox)}
	if len(l.outbox) > 0 {
		oldest := slices.MinFunc(l.outbox, func(a, b *memEvent) int { return a.e.OccurredAt.Compare(b.e.OccurredAt) })
		st.Oldest = l.now().Sub(oldest.e.OccurredAt)
	}
	return st, nil
}

// ClaimPending implements order.PendingLedger as the Store does: the due
// pending invoices older than c.OlderThan whose attempt has ended, oldest
// key first, each one's next claim put off by c.Backoff·2^(earlier
// claims), at most c.MaxBackoff.
func (l *Mem) ClaimPending(_ context.Context, c order.PendingClaim) ([]order.Invoice, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var due []*memInvoice
	for _, m := range l.invoices {
		if m.inv.Status == order.StatusPending && m.updated.Before(now.Add(-c.OlderThan)) && !m.due.After(now) && m.free(now) {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b *memInvoice) int {
		return cmp.Or(a.updated.Compare(b.updated), cmp.Compare(a.inv.OrderID, b.inv.OrderID))
	})
	out := make([]order.Invoice, 0, min(c.Limit, len(due)))
	for _, m := range due[:min(c.Limit, len(due))] {
		wait := c.MaxBackoff
		if d := float64(c.Backoff) * math.Pow(2, float64(min(m.claims, 30))); d < float64(c.MaxBackoff) {
			wait = time.Duration(d)
		}
		m.due, m.claims = now.Add(wait), m.claims+1
		out = append(out, m.inv)
	}
	return out, nil
}

// PendingStats implements order.PendingLedger.
func (l *Mem) PendingStats(context.Context) (order.PendingStats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var st order.PendingStats
	for _, m := range l.invoices {
		switch m.inv.Status {
		case order.StatusPending:
			st.Count++
			st.Oldest = max(st.Oldest, now.Sub(m.updated))
		case order.StatusHeld:
			st.Held++
		}
	}
	return st, nil
}

// HoldStale implements order.PendingLedger: every pending invoice whose key
// was first sent terms.HoldAfter or longer ago and no live attempt holds is
// held, with its InvoiceHeld.
func (l *Mem) HoldStale(_ context.Context, terms order.AttemptTerms) ([]string, error) {
	if terms.HoldAfter <= 0 {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var held []string
	for _, m := range l.invoices {
		if m.inv.Status == order.StatusPending && m.free(now) && m.aged(now, terms) {
			l.hold(m, now)
			held = append(held, m.inv.OrderID)
		}
	}
	slices.Sort(held)
	return held, nil
}
