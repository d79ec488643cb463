package order

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofrs/uuid/v5"
)

// Outcome is the final result of one event, the label of billing_events_total.
type Outcome string

// Outcomes of an event that did not fail.
const (
	OutcomeCharged        Outcome = "charged"
	OutcomeDeclined       Outcome = "declined"
	OutcomeDuplicate      Outcome = "duplicate"       // same event_id seen before by this group
	OutcomeDuplicateOrder Outcome = "duplicate_order" // order already invoiced under another event (or a dedup row that expired)
	OutcomeRetried        Outcome = "retried"         // routed to a retry tier
	OutcomeDeadLettered   Outcome = "dead_lettered"   // routed to the DLQ
)

// Outcomes returns every Outcome in the order declared above: the label
// values of billing_events_total, which the service creates at zero and
// the demo reports. A new Outcome is added here too.
func Outcomes() []Outcome {
	return []Outcome{OutcomeCharged, OutcomeDeclined, OutcomeDuplicate, OutcomeDuplicateOrder, OutcomeRetried, OutcomeDeadLettered}
}

// BillingService bills each order once, whatever the number of events and
// deliveries for it. See Bill.
type BillingService struct {
	ledger  Ledger
	gateway PaymentGateway
	group   string
	terms   AttemptTerms
	now     func() time.Time
}

// BillingOption configures a BillingService.
type BillingOption func(*BillingService)

// WithAttemptTerms sets the attempts' life and the key age past which an
// invoice is held (default: NewAttemptTerms(10s, 24h), the configuration's
// defaults).
func WithAttemptTerms(t AttemptTerms) BillingOption {
	return func(s *BillingService) { s.terms = t }
}

// NewBillingService returns a BillingService that records processed events
// under consumer group group.
func NewBillingService(ledger Ledger, gateway PaymentGateway, group string, opts ...BillingOption) *BillingService {
	s := &BillingService{ledger: ledger, gateway: gateway, group: group,
		terms: NewAttemptTerms(10*time.Second, 24*time.Hour), now: time.Now}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Terms returns the attempt terms the service works under.
func (s *BillingService) Terms() AttemptTerms { return s.terms }

// Bill runs the three steps of the design (docs/design.md):
//
//  1. reserve, one transaction: the processed_event row; the order's
//     invoice inserted as pending under this event's id when the event is
//     new and the order has none, or a rejected one reopened; and the
//     pending invoice's attempt taken for this event (Ledger);
//  2. charge, no transaction open: the gateway, with the invoice's key,
//     only if this event holds the attempt;
//  3. settle, one transaction: the invoice becomes charged, declined,
//     rejected or held, if the attempt is still the only one that can be in
//     flight.
//
// The rules (docs/interface.md §4): an event whose id was seen before changes
// nothing (no invoice for another order, no charge), except that a pending
// invoice of its order is resumed, and that a rejected invoice is reopened
// by the event whose id is its key, or by any event first seen for this
// same order (a DLQ replay of a corrected event). An order whose invoice is
// charged or declined is a duplicate (by event id when this event's dedup
// row already existed, by order otherwise). A pending invoice is always
// resumed with the key it records, whichever event finds it, so a second
// event for the order can never charge under a second key; and only by the
// path that holds its attempt, so that no path can decide the invoice
// (reject, reopen, hold) while another path's request under its key may
// still be at the gateway.
//
// Errors: an *AttemptBusyError when another path holds the attempt (the
// caller waits and calls again); a *HeldError when the invoice is held (a
// 422 now, its key too old, or held before a first-seen event came); the
// gateway's error otherwise, the invoice then pending (transient) or
// rejected (a permanent refusal: no money moved; the next event of the
// order reopens it).
func (s *BillingService) Bill(ctx context.Context, evt OrderConfirmedEvent) (Outcome, error) {
	asked := s.now()
	reserve := func() (Reservation, error) {
		r, err := s.ledger.Reserve(ctx, Invoice{
			OrderID:    evt.OrderID,
			EventID:    evt.EventID,
			CustomerID: evt.CustomerID,
			Amount:     evt.TotalAmount,
			Currency:   evt.Currency,
			Status:     StatusPending,
		}, s.group, s.terms)
		if err != nil {
			return r, fmt.Errorf("reserve event %s: %w", evt.EventID, err)
		}
		return r, nil
	}
	r, err := reserve()
	if err != nil {
		return "", err
	}
	if r.Found && r.Invoice.Status == StatusRejected && !r.Reopened && r.Wait > 0 {
		// An attempt under the rejected key may still be in flight: no
		// second key before it has ended. The event looks again then.
		return "", &AttemptBusyError{OrderID: r.Invoice.OrderID, Wait: r.Wait}
	}
	if r.Found && r.Invoice.Status == StatusRejected && !r.Reopened {
		// The reserve decides a reopen on what its statement saw, and
		// reads the invoice afterwards: another path's rejection that
		// committed in between shows here as rejected and not reopened,
		// by an event that may have been one to reopen it. Looking once
		// more sees the rejection from the start (the event's dedup row
		// now records its order, so a first-seen event reopens as a
		// replay of the order's own would).
		again, err := reserve()
		if err != nil {
			return "", err
		}
		again.FirstSeen = again.FirstSeen || r.FirstSeen
		r = again
	}
	if !r.Found {
		// The id was seen before, or keys another order's invoice: a
		// duplicate, whatever order this body names.
		return OutcomeDuplicate, nil
	}
	inv := r.Invoice
	switch inv.Status {
	case StatusPending:
		if r.Attempt == 0 {
			return "", &AttemptBusyError{OrderID: inv.OrderID, Wait: r.Wait}
		}
		return s.charge(ctx, inv, r.Attempt, asked)
	case StatusHeld:
		// Every event of an order a person has to decide on waits in the
		// DLQ for that decision, as the event that held it does; a seen
		// one too, since it may come back because its DLQ write never
		// completed (a crash, or a settle whose commit was lost): counted
		// a duplicate, it would leave the record nowhere to be replayed
		// from. A second copy in the DLQ is the lesser harm.
		return "", &HeldError{OrderID: inv.OrderID, Reason: inv.Reason}
	}
	// Charged or declined; or rejected and not reopened by this event (a
	// seen id that is neither the rejected key nor first seen for this
	// order).
	if !r.FirstSeen {
		return OutcomeDuplicate, nil
	}
	// New to the dedup table, yet the order is billed: another event of
	// the order, or this one replayed after its dedup row expired.
	return OutcomeDuplicateOrder, nil
}

// Resume takes the attempt of orderID's invoice, pending under key, and
// charges and settles it as Bill does: the pending completer's path, for an
// invoice no event is bringing back. ErrNotPending when the invoice has
// moved on since the caller saw it; *AttemptBusyError when another path
// holds its attempt; *HeldError when its key is too old to send again.
func (s *BillingService) Resume(ctx context.Context, orderID string, key uuid.UUID) (Outcome, error) {
	asked := s.now()
	t, err := s.ledger.TakeAttempt(ctx, orderID, key, s.terms)
	switch {
	case err != nil:
		return "", fmt.Errorf("take the attempt of order %s key %s: %w", orderID, key, err)
	case t.Held:
		return "", &HeldError{OrderID: orderID, Reason: t.Invoice.Reason}
	case !t.Found || t.Invoice.Status != StatusPending || t.Invoice.EventID != key:
		return "", fmt.Errorf("order %s key %s: %w", orderID, key, ErrNotPending)
	case t.Attempt == 0:
		return "", &AttemptBusyError{OrderID: orderID, Wait: t.Wait}
	}
	return s.charge(ctx, t.Invoice, t.Attempt, asked)
}

// Reasons recorded on invoices that are held or rejected without a
// gateway text of their own.
const (
	ReasonKeyReused = "the gateway answered 422: the key was used with another body, money may have moved under it"
	// ReasonIndeterminate is a RefusalIndeterminate's: the gateway's
	// answer neither proves a charge nor rules one out.
	ReasonIndeterminate = "the gateway's answer does not say whether money moved under the key, and asking again would not tell more"
	ReasonKeyAged       = "its key was first sent more than half of BILLING_GATEWAY_KEY_TTL ago: the gateway may have forgotten a charge made under it"
)

// charge sends the pending invoice's key under attempt, which the caller
// took after asked, and settles the gateway's answer: charged or declined;
// rejected, with a permanent error for the DLQ, when the gateway refused
// the request without executing it; held for a 422 (the key was used with
// another body). A request still unsent when the attempt's send window
// closes is not sent: the event looks again (AttemptBusyError).
//
// A settle that moves nothing (another path settled, or the attempt
// expired and another took over) is never reported as this event's
// outcome: the event looks again and finds what the other path decided.
func (s *BillingService) charge(ctx context.Context, inv Invoice, attempt int64, asked time.Time) (Outcome, error) {
	deadline := asked.Add(s.terms.sendWindow())
	if !s.now().Before(deadline) {
		s.release(ctx, inv, attempt, AnswerUnsent)
		return "", &AttemptBusyError{OrderID: inv.OrderID}
	}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	res, err := s.gateway.Charge(cctx, ChargeRequest{
		IdempotencyKey: inv.EventID,
		OrderID:        inv.OrderID,
		CustomerID:     inv.CustomerID,
		Amount:         Money{Amount: inv.Amount, Currency: inv.Currency},
	})
	cancel()
	settle := Settlement{OrderID: inv.OrderID, Key: inv.EventID, Attempt: attempt, Answer: AnswerOf(res, err)}
	if err != nil {
		err = fmt.Errorf("charge order %s key %s: %w", inv.OrderID, inv.EventID, err)
		refused, ok := errors.AsType[*ChargeRefusedError](err)
		switch {
		case ok && refused.Kind == RefusalRejected:
			settle.Status, settle.Reason = StatusRejected, reasonOf(err)
		case ok && (refused.Kind == RefusalKeyReused || refused.Kind == RefusalIndeterminate):
			reason := ReasonKeyReused
			if refused.Kind == RefusalIndeterminate {
				reason = ReasonIndeterminate
			}
			settle.Status, settle.Reason = StatusHeld, reason
			err = &HeldError{OrderID: inv.OrderID, Reason: reason, Err: err}
		default:
			if ChargeEnded(err) {
				s.release(ctx, inv, attempt, settle.Answer)
			}
			return "", err
		}
		ok, serr := s.ledger.Settle(ctx, settle)
		switch {
		case serr != nil:
			// Still pending: the next attempt is refused again and
			// settles then. The settle error decides what happens to
			// the event, so the refusal is only its text.
			return "", fmt.Errorf("settle order %s %s: %w (after: %s)", inv.OrderID, settle.Status, serr, err.Error())
		case !ok:
			return "", &AttemptBusyError{OrderID: inv.OrderID}
		}
		return "", err
	}
	status, outcome := StatusCharged, OutcomeCharged
	if res.Status == ChargeDeclined {
		status, outcome = StatusDeclined, OutcomeDeclined
	}
	settle.Status, settle.ChargeID = status, res.ChargeID
	if !ValidChargeID(res.ChargeID) {
		// A gateway adapter keeps only ids an invoice may hold (docs/interface.md
		// §6); another, kept here, would fail the settle after the money
		// moved. The charge stands without it.
		settle.ChargeID = ""
	}
	ok, err := s.ledger.Settle(ctx, settle)
	switch {
	case err != nil:
		return "", fmt.Errorf("settle order %s: %w", inv.OrderID, err)
	case !ok:
		return "", &AttemptBusyError{OrderID: inv.OrderID}
	}
	return outcome, nil
}

// release gives attempt back early, its request being over (answer says
// how, for the invoice's history); if that fails the attempt simply lives
// out its life.
func (s *BillingService) release(ctx context.Context, inv Invoice, attempt int64, answer string) {
	_ = s.ledger.Release(context.WithoutCancel(ctx), inv.OrderID, inv.EventID, attempt, answer)
}

// maxReasonBytes bounds the reason recorded on an invoice (and published
// with its event, docs/interface.md §9).
const maxReasonBytes = 256

// reasonOf is err's text as one line of at most maxReasonBytes.
func reasonOf(err error) string { return oneLineBounded(err.Error(), maxReasonBytes) }

// oneLineBounded is s on one line (runs of white space as one space), cut
// to at most n bytes on a rune boundary.
func oneLineBounded(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// chargeEnded marks a gateway error whose request is known to be over.
type chargeEnded struct{ error }

func (e chargeEnded) Unwrap() error { return e.error }

// MarkChargeEnded marks err, returned by PaymentGateway.Charge, as the end
// of its request: it was never sent (could not connect, the breaker open),
// or the gateway answered it without executing it (429, 500, 503, 401,
// 403). Nothing under its key is left running at the gateway, so the
// attempt that sent it may end at once. A timeout, a reset, a 502 or 504
// from a proxy in front of the gateway, a 409 "in progress" are not marked:
// a request under the key may still run there.
func MarkChargeEnded(err error) error {
	if err == nil {
		return nil
	}
	return chargeEnded{err}
}

// ChargeEnded reports whether err was marked by MarkChargeEnded.
func ChargeEnded(err error) bool {
	var e chargeEnded
	return errors.As(err, &e)
}
