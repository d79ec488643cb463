package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
)

// Mem is order.Ledger in memory, with the rules of infra/postgres's Store:
// Run checks both against the same table. core/order's tests read the
// billing rules over it, and the model test compares the two.
type Mem struct {
	mu       sync.Mutex
	now      func() time.Time
	dedup    map[string]string // event id / group → the order it was first seen with
	invoices map[string]*memInvoice
}

type memInvoice struct {
	inv     order.Invoice
	attempt int64     // the last attempt taken; 0: none
	until   time.Time // when it ends; zero: ended
}

var _ order.Ledger = (*Mem)(nil)

// NewMem returns an empty in-memory ledger on the wall clock.
func NewMem() *Mem {
	return &Mem{now: time.Now, dedup: map[string]string{}, invoices: map[string]*memInvoice{}}
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
func (m *memInvoice) takeOrHold(now time.Time, terms order.AttemptTerms, attempt int64) (held bool) {
	if m.aged(now, terms) {
		m.inv.Status, m.inv.Reason, m.until = order.StatusHeld, order.ReasonKeyAged, time.Time{}
		return true
	}
	m.attempt, m.until = attempt, now.Add(terms.Life)
	if m.inv.KeySentAt.IsZero() {
		m.inv.KeySentAt = now
	}
	return false
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
			l.invoices[inv.OrderID] = &memInvoice{inv: inv, attempt: attempt, until: now.Add(terms.Life)}
		}
	case m.inv.Status == order.StatusRejected &&
		(r.FirstSeen || m.inv.EventID == inv.EventID || firstOrder == inv.OrderID) && !l.keyHeld(inv.EventID, inv.OrderID):
		m.inv.EventID, m.inv.CustomerID, m.inv.Amount, m.inv.Currency = inv.EventID, inv.CustomerID, inv.Amount, inv.Currency
		m.inv.Status, m.inv.ChargeID, m.inv.Reason, m.inv.KeySentAt = order.StatusPending, "", "", now
		m.inv.Reopens++
		m.attempt, m.until = attempt, now.Add(terms.Life)
		r.Reopened = true
	case m.inv.Status == order.StatusPending && m.free(now):
		r.Held = m.takeOrHold(now, terms, attempt)
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
		t.Held = m.takeOrHold(now, terms, attempt)
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
	m, ok := l.invoices[s.OrderID]
	if !ok || m.inv.Status != order.StatusPending || m.inv.EventID != s.Key || (m.attempt != s.Attempt && !m.free(l.now())) {
		return false, nil
	}
	m.inv.Status, m.inv.ChargeID, m.inv.Reason, m.until = s.Status, s.ChargeID, s.Reason, time.Time{}
	return true, nil
}

// Release implements order.Ledger.
func (l *Mem) Release(_ context.Context, orderID string, key uuid.UUID, attempt int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m, ok := l.invoices[orderID]; ok && m.inv.Status == order.StatusPending && m.inv.EventID == key && m.attempt == attempt {
		m.until = time.Time{}
	}
	return nil
}
