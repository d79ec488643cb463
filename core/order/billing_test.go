package order_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/core/order/ledgertest"
)

// scriptedGateway answers each call with the next answer of its script
// (a success once the script is used up) and records the keys.
type scriptedGateway struct {
	script []error // nil: success; errDecline: a decline
	keys   []uuid.UUID
}

var errDecline = errors.New("decline")

func (g *scriptedGateway) Charge(_ context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	g.keys = append(g.keys, req.IdempotencyKey)
	var answer error
	if len(g.script) > 0 {
		answer, g.script = g.script[0], g.script[1:]
	}
	switch {
	case answer == nil:
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: fmt.Sprintf("ch-%d", len(g.keys))}, nil
	case errors.Is(answer, errDecline):
		return order.ChargeResult{Status: order.ChargeDeclined}, nil
	}
	return order.ChargeResult{}, answer
}

func refusal(kind order.RefusalKind, code int) error {
	return &order.PermanentError{Op: "charge", Err: &order.ChargeRefusedError{Kind: kind, StatusCode: code, Err: fmt.Errorf("%d", code)}}
}

var (
	rejected  = refusal(order.RefusalRejected, 400)
	keyReused = refusal(order.RefusalKeyReused, 422)
	// indeterminate is an answer that neither proves a charge nor rules one
	// out, and that asking again would only repeat (Stripe's 500 with
	// Stripe-Should-Retry: false, a PaymentIntent state billing does not know).
	indeterminate = refusal(order.RefusalIndeterminate, 500)
	// transient is a 503: the gateway answered, nothing of the request runs
	// there, so its attempt ends at once.
	transient = order.MarkChargeEnded(&order.TransientError{Op: "charge", Err: errors.New("503")})
	// timeout got no answer: its request may still run at the gateway, so
	// its attempt lives on.
	timeout = &order.TransientError{Op: "charge", Err: errors.New("no reply within 10s")}
)

// TestBillRules is docs/interface.md §4's table for one order's events: each step
// bills an event (by name: events with the same name share the event_id;
// order and amount as given) and expects an outcome or an error class; at
// the end, the gateway saw these keys and the invoice is in this state.
func TestBillRules(t *testing.T) {
	t.Parallel()
	type step struct {
		event   string // E1, E2…: the event_id
		order   string
		amount  int64
		want    order.Outcome
		wantErr order.Class // when want is ""
	}
	tests := []struct {
		name       string
		gateway    []error
		steps      []step
		wantKeys   []string
		wantStatus order.InvoiceStatus // of order A
		wantKey    string              // of order A's invoice
		wantAmount int64
		wantB      bool // order B has an invoice
	}{{
		name:     "first time",
		steps:    []step{{"E1", "A", 100, order.OutcomeCharged, 0}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100,
	}, {
		name:     "the same event twice",
		steps:    []step{{"E1", "A", 100, order.OutcomeCharged, 0}, {"E1", "A", 100, order.OutcomeDuplicate, 0}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100,
	}, {
		name:     "another event of a charged order",
		steps:    []step{{"E1", "A", 100, order.OutcomeCharged, 0}, {"E2", "A", 200, order.OutcomeDuplicateOrder, 0}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100,
	}, {
		name:     "another event of a declined order",
		gateway:  []error{errDecline},
		steps:    []step{{"E1", "A", 100, order.OutcomeDeclined, 0}, {"E2", "A", 200, order.OutcomeDuplicateOrder, 0}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusDeclined, wantKey: "E1", wantAmount: 100,
	}, {
		name:     "an event_id reused for another order is a duplicate",
		steps:    []step{{"E1", "A", 100, order.OutcomeCharged, 0}, {"E1", "B", 500, order.OutcomeDuplicate, 0}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100,
	}, {
		name:    "a pending invoice is resumed under its first key",
		gateway: []error{transient},
		steps: []step{{"E1", "A", 100, "", order.ClassTransient}, {"E2", "A", 200, order.OutcomeCharged, 0},
			{"E1", "A", 100, order.OutcomeDuplicate, 0}},
		wantKeys: []string{"E1", "E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100,
	}, {
		name:    "a reused event_id resumes nothing of another order but its own pending invoice",
		gateway: []error{nil, transient},
		steps: []step{{"E2", "B", 500, order.OutcomeCharged, 0}, {"E1", "A", 100, "", order.ClassTransient},
			{"E2", "A", 300, order.OutcomeCharged, 0}},
		wantKeys: []string{"E2", "E1", "E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100, wantB: true,
	}, {
		name:     "rejected, then the replay of that record reopens it",
		gateway:  []error{rejected},
		steps:    []step{{"E1", "A", 100, "", order.ClassPermanent}, {"E1", "A", 100, order.OutcomeCharged, 0}},
		wantKeys: []string{"E1", "E1"}, wantStatus: order.StatusCharged, wantKey: "E1", wantAmount: 100,
	}, {
		name:     "rejected, then a new event reopens it under its key and amount",
		gateway:  []error{rejected},
		steps:    []step{{"E1", "A", 100, "", order.ClassPermanent}, {"E2", "A", 90, order.OutcomeCharged, 0}},
		wantKeys: []string{"E1", "E2"}, wantStatus: order.StatusCharged, wantKey: "E2", wantAmount: 90,
	}, {
		name:    "rejected stays rejected for a seen event_id that is not its key",
		gateway: []error{nil, rejected},
		steps: []step{{"E2", "B", 500, order.OutcomeCharged, 0}, {"E1", "A", 100, "", order.ClassPermanent},
			{"E2", "A", 300, order.OutcomeDuplicate, 0}},
		wantKeys: []string{"E2", "E1"}, wantStatus: order.StatusRejected, wantKey: "E1", wantAmount: 100, wantB: true,
	}, {
		name:    "rejected twice, then charged",
		gateway: []error{rejected, rejected},
		steps: []step{{"E1", "A", 100, "", order.ClassPermanent}, {"E2", "A", 90, "", order.ClassPermanent},
			{"E3", "A", 80, order.OutcomeCharged, 0}, {"E1", "A", 100, order.OutcomeDuplicate, 0}},
		wantKeys: []string{"E1", "E2", "E3"}, wantStatus: order.StatusCharged, wantKey: "E3", wantAmount: 80,
	}, {
		name:    "rejected, then the replay of a corrected event first seen for the order reopens it",
		gateway: []error{transient, rejected},
		steps: []step{{"E1", "A", 100, "", order.ClassTransient}, {"E2", "A", 90, "", order.ClassPermanent},
			{"E2", "A", 90, order.OutcomeCharged, 0}},
		wantKeys: []string{"E1", "E1", "E2"}, wantStatus: order.StatusCharged, wantKey: "E2", wantAmount: 90,
	}, {
		// Seen events go to the DLQ again too: a redelivery after a crash
		// between the hold and the DLQ write would otherwise leave the
		// record nowhere, and a person's decision nothing to replay.
		name:    "422 holds the invoice: nothing is sent again, its events go to the DLQ, seen or new",
		gateway: []error{keyReused},
		steps: []step{{"E1", "A", 100, "", order.ClassPermanent}, {"E2", "A", 90, "", order.ClassPermanent},
			{"E1", "A", 100, "", order.ClassPermanent}, {"E2", "A", 90, "", order.ClassPermanent}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusHeld, wantKey: "E1", wantAmount: 100,
	}, {
		name:    "an answer that says nothing of the money holds the invoice like a 422",
		gateway: []error{indeterminate},
		steps: []step{{"E1", "A", 100, "", order.ClassPermanent}, {"E2", "A", 90, "", order.ClassPermanent},
			{"E1", "A", 100, "", order.ClassPermanent}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusHeld, wantKey: "E1", wantAmount: 100,
	}, {
		name:    "another event waits while the first one's request may still be at the gateway",
		gateway: []error{timeout},
		steps: []step{{"E1", "A", 100, "", order.ClassTransient}, {"E2", "A", 90, "", order.ClassBusy},
			{"E1", "A", 100, "", order.ClassBusy}},
		wantKeys: []string{"E1"}, wantStatus: order.StatusPending, wantKey: "E1", wantAmount: 100,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ledger, gw := ledgertest.NewMem(), &scriptedGateway{script: slices.Clone(tt.gateway)}
			svc := order.NewBillingService(ledger, gw, "g")
			ids := map[string]uuid.UUID{}
			names := map[uuid.UUID]string{}
			id := func(name string) uuid.UUID {
				if _, ok := ids[name]; !ok {
					ids[name] = uuid.Must(uuid.NewV7())
					names[ids[name]] = name
				}
				return ids[name]
			}
			for i, s := range tt.steps {
				got, err := svc.Bill(context.Background(), order.OrderConfirmedEvent{EventID: id(s.event), EventType: order.EventTypeOrderConfirmed,
					OrderID: s.order, CustomerID: "cus-" + s.order, TotalAmount: s.amount, Currency: "EUR"})
				switch {
				case s.want != "" && (err != nil || got != s.want):
					t.Errorf("step %d: Bill(%s of %s) = %q, %v; want %s", i+1, s.event, s.order, got, err, s.want)
				case s.want == "" && (err == nil || order.Classify(err) != s.wantErr):
					t.Errorf("step %d: Bill(%s of %s) = %q, %v; want a %v error", i+1, s.event, s.order, got, err, s.wantErr)
				}
			}
			var keys []string
			for _, k := range gw.keys {
				keys = append(keys, names[k])
			}
			if !slices.Equal(keys, tt.wantKeys) {
				t.Errorf("gateway keys = %v, want %v", keys, tt.wantKeys)
			}
			inv, _ := ledger.Invoice("A")
			if inv.Status != tt.wantStatus || names[inv.EventID] != tt.wantKey || inv.Amount != tt.wantAmount {
				t.Errorf("invoice A = %s under %s for %d, want %s under %s for %d",
					inv.Status, names[inv.EventID], inv.Amount, tt.wantStatus, tt.wantKey, tt.wantAmount)
			}
			if _, ok := ledger.Invoice("B"); ok != tt.wantB {
				t.Errorf("invoice B exists = %v, want %v", ok, tt.wantB)
			}
		})
	}
}

// TestMemLedgerContract runs the Ledger contract on the in-memory ledger the
// rules above are read over; infra/postgres runs it on the store.
func TestMemLedgerContract(t *testing.T) {
	t.Parallel()
	ledgertest.Run(t, func(*testing.T) order.Ledger { return ledgertest.NewMem() })
}

// TestMemOutboxContract runs the Outbox contract on the in-memory store the
// relay's tests run over; infra/postgres runs it on the store.
func TestMemOutboxContract(t *testing.T) {
	t.Parallel()
	ledgertest.RunOutbox(t, func(*testing.T) ledgertest.Store { return ledgertest.NewMem() })
}

// TestMemPendingContract runs the PendingLedger contract on the in-memory
// store the completer's tests run over; infra/postgres runs it on the store.
func TestMemPendingContract(t *testing.T) {
	t.Parallel()
	ledgertest.RunPending(t, func(*testing.T) ledgertest.Store { return ledgertest.NewMem() })
}
