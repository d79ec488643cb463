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

// errInvoiceVanished means an invoice seen a moment ago is gone; invoices are
// never deleted, so this is a bug or a manual edit, not something to retry.
var errInvoiceVanished = errors.New("invoice vanished between insert and read")

// Bill runs the three steps of DESIGN.md:
//
//  1. reserve, one transaction: the processed_event row, and the order's
//     invoice inserted as pending under this event's id unless it exists;
//  2. charge, no transaction open: the gateway, with the invoice's key;
//  3. settle, one transaction: the invoice becomes charged or declined.
//
// An order whose invoice is final is a duplicate (by event id when this
// event's dedup row already existed, by order otherwise). A pending invoice
// is always resumed with the key it records, whichever event finds it, so a
// second event for the order can never charge under a second key.
//
// A returned error leaves the invoice pending and the dedup row in place;
// a later delivery of any event of the order resumes the charge.
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
		return "", fmt.Errorf("reserve event %s order %s: %w", evt.EventID, evt.OrderID, errInvoiceVanished)
	}

	inv := r.Invoice
	if inv.Status.Final() {
		if !r.FirstSeen {
			return OutcomeDuplicate, nil
		}
		// New to the dedup table, yet the order is billed: another event of
		// the order, or this one replayed after its dedup row expired.
		return OutcomeDuplicateOrder, nil
	}
	return s.resume(ctx, inv)
}

// resume charges a pending invoice under its recorded key and settles it.
func (s *BillingService) resume(ctx context.Context, inv Invoice) (Outcome, error) {
	res, err := s.gateway.Charge(ctx, ChargeRequest{
		IdempotencyKey: inv.EventID,
		OrderID:        inv.OrderID,
		CustomerID:     inv.CustomerID,
		Amount:         Money{Amount: inv.Amount, Currency: inv.Currency},
	})
	if err != nil {
		return "", fmt.Errorf("charge order %s key %s: %w", inv.OrderID, inv.EventID, err)
	}
	status, outcome := StatusCharged, OutcomeCharged
	if res.Status == ChargeDeclined {
		status, outcome = StatusDeclined, OutcomeDeclined
	}
	if _, err := s.ledger.Settle(ctx, inv.OrderID, status, res.ChargeID); err != nil {
		return "", fmt.Errorf("settle order %s: %w", inv.OrderID, err)
	}
	return outcome, nil
}
