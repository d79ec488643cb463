package order

import (
	"context"
	"errors"
	"fmt"
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
}

// NewBillingService returns a BillingService that records processed events
// under consumer group group.
func NewBillingService(ledger Ledger, gateway PaymentGateway, group string) *BillingService {
	return &BillingService{ledger: ledger, gateway: gateway, group: group}
}

// Bill runs the three steps of DESIGN.md:
//
//  1. reserve, one transaction: the processed_event row; the order's
//     invoice inserted as pending under this event's id when the event is
//     new and the order has none, or a rejected one reopened (Ledger);
//  2. charge, no transaction open: the gateway, with the invoice's key;
//  3. settle, one transaction: the invoice becomes charged, declined or
//     rejected.
//
// The rules (CONTRACT.md §4): an event whose id was seen before changes
// nothing (no invoice for another order, no charge), except that a pending
// invoice of its order is resumed and the replay of the event that was
// rejected reopens its invoice. An order whose invoice is charged or
// declined is a duplicate (by event id when this event's dedup row already
// existed, by order otherwise). A pending invoice is always resumed with the
// key it records, whichever event finds it, so a second event for the order
// can never charge under a second key.
//
// A returned error leaves the dedup row in place and the invoice pending
// (a transient error, or a 422: the key was used with another body) or
// rejected (a permanent refusal: no money moved; the next event of the
// order reopens it).
func (s *BillingService) Bill(ctx context.Context, evt OrderConfirmedEvent) (Outcome, error) {
	r, err := s.ledger.Reserve(ctx, Invoice{
		OrderID:    evt.OrderID,
		EventID:    evt.EventID,
		CustomerID: evt.CustomerID,
		Amount:     evt.TotalAmount,
		Currency:   evt.Currency,
		Status:     StatusPending,
	}, s.group)
	if err != nil {
		return "", fmt.Errorf("reserve event %s: %w", evt.EventID, err)
	}
	if !r.Found {
		// The id was seen before, or keys another order's invoice: a
		// duplicate, whatever order this body names.
		return OutcomeDuplicate, nil
	}
	inv := r.Invoice
	if inv.Status == StatusPending {
		return s.Resume(ctx, inv)
	}
	// Charged or declined; or rejected and not reopened by this event (a
	// seen id that is not the rejected key).
	if !r.FirstSeen {
		return OutcomeDuplicate, nil
	}
	// New to the dedup table, yet the order is billed: another event of
	// the order, or this one replayed after its dedup row expired.
	return OutcomeDuplicateOrder, nil
}

// Resume charges a pending invoice under its recorded key and settles it:
// charged or declined on the gateway's answer; rejected, with a permanent
// error for the DLQ, when the gateway refused the request without executing
// it. A 422 (the key was used with another body) leaves it pending, with a
// permanent error: it needs a person. Resuming twice at once (the consumer
// and the pending completer) is safe: both calls carry the same key, so the
// gateway answers the second from the first, and Settle moves the invoice
// only from pending under that key.
func (s *BillingService) Resume(ctx context.Context, inv Invoice) (Outcome, error) {
	res, err := s.gateway.Charge(ctx, ChargeRequest{
		IdempotencyKey: inv.EventID,
		OrderID:        inv.OrderID,
		CustomerID:     inv.CustomerID,
		Amount:         Money{Amount: inv.Amount, Currency: inv.Currency},
	})
	if err != nil {
		err = fmt.Errorf("charge order %s key %s: %w", inv.OrderID, inv.EventID, err)
		var refused *ChargeRefusedError
		if errors.As(err, &refused) && refused.Kind == RefusalRejected {
			if _, serr := s.ledger.Settle(ctx, inv.OrderID, inv.EventID, StatusRejected, ""); serr != nil {
				// Still pending: the next attempt is refused again and
				// settles then. The settle error decides what happens to
				// the event, so the refusal is only its text.
				return "", fmt.Errorf("settle order %s rejected: %w (after: %v)", inv.OrderID, serr, err)
			}
		}
		return "", err
	}
	status, outcome := StatusCharged, OutcomeCharged
	if res.Status == ChargeDeclined {
		status, outcome = StatusDeclined, OutcomeDeclined
	}
	if _, err := s.ledger.Settle(ctx, inv.OrderID, inv.EventID, status, res.ChargeID); err != nil {
		return "", fmt.Errorf("settle order %s: %w", inv.OrderID, err)
	}
	return outcome, nil
}
