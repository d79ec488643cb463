package order

import (
	"context"
	"errors"
	"time"

	"github.com/gofrs/uuid/v5"
)

// InvoiceStatus is the state of an order's invoice.
type InvoiceStatus string

// Invoice states. An invoice is written pending before the money moves and
// becomes charged, declined, rejected or held after the gateway answers.
const (
	StatusPending  InvoiceStatus = "pending"
	StatusCharged  InvoiceStatus = "charged"
	StatusDeclined InvoiceStatus = "declined"
	// StatusRejected: the gateway refused the charge without executing it
	// (docs/interface.md §4): no money moved. Final for its key, but not billed:
	// the next event of the order reopens the invoice under its own key.
	StatusRejected InvoiceStatus = "rejected"
	// StatusHeld: only a person can tell whether money moved under the key
	// (a 422: the key was used with another body; or the key is past half
	// of its lifetime at the gateway). Never sent again automatically; a
	// person settles it with `billing invoice resolve`.
	StatusHeld InvoiceStatus = "held"
)

// Final reports whether the invoice has left pending under its key for
// good (charged, declined, rejected or held): a settle target.
func (s InvoiceStatus) Final() bool {
	return s == StatusCharged || s == StatusDeclined || s == StatusRejected || s == StatusHeld
}

// Invoice is the one bill of an order. EventID is the event that opened it;
// its value is the charge's Idempotency-Key for as long as the invoice lives.
type Invoice struct {
	OrderID    string
	EventID    uuid.UUID
	CustomerID string
	Amount     int64
	Currency   string
	Status     InvoiceStatus
	ChargeID   string // "" while pending, or when the gateway did not say
	Reason     string // why it was rejected or held; "" otherwise
	CreatedAt  time.Time
	// KeySentAt is when the first attempt under EventID was taken (zero:
	// none yet): the clock of AttemptTerms.HoldAfter.
	KeySentAt time.Time
	// Reopens counts the times the invoice went back to pending after a
	// decision (a rejected one reopened, a held one resumed by a person):
	// part of a transition's event id (InvoiceEventID).
	Reopens int
}

// AttemptTerms bound the attempts of docs/interface.md §4, "one attempt per key at
// a time". A path sends an invoice's key only after it has taken the
// invoice's attempt in the ledger (pending under that key, no other attempt
// alive), and the invoice leaves pending under that key only once no
// attempt can still be in flight. Time is the ledger's clock (Postgres's),
// never a pod's.
type AttemptTerms struct {
	// Life is how long an attempt is alive once taken: the gateway timeout
	// plus AttemptMargin. The path that took it sends nothing after
	// Life - AttemptMargin/2 from when it asked for it (BillingService), so
	// that when the attempt expires nothing of it is left at the gateway.
	Life time.Duration
	// HoldAfter is half of the gateway's key lifetime
	// (BILLING_GATEWAY_KEY_TTL / 2): a pending invoice whose key was first
	// sent longer ago is held instead of sent again, since the gateway may
	// by now have forgotten a charge made under it. 0: never.
	HoldAfter time.Duration
}

// AttemptMargin is what an attempt lives beyond the gateway timeout: the
// round trips between the ledger's clock starting the attempt and the
// request leaving, and a request's bytes still on their way when its
// sender gave up.
const AttemptMargin = 5 * time.Second

// NewAttemptTerms returns the terms for a gateway whose requests time out
// after paymentTimeout and which keeps an Idempotency-Key for keyTTL.
func NewAttemptTerms(paymentTimeout, keyTTL time.Duration) AttemptTerms {
	return AttemptTerms{Life: paymentTimeout + AttemptMargin, HoldAfter: keyTTL / 2}
}

// sendWindow is how long after asking for an attempt its taker may still
// send: the attempt's life less half the margin (a quarter of the life, for
// the short lives of tests), so the request is over, by the taker's own
// deadline, before the ledger lets anyone else decide.
func (t AttemptTerms) sendWindow() time.Duration { return t.Life - min(AttemptMargin/2, t.Life/4) }

// Reservation is what the reserve transaction found: whether the event's
// dedup row was new, the order's invoice after the insert (this event's,
// or the one an earlier event of the order opened), and whether this
// event may send its key.
type Reservation struct {
	FirstSeen bool    // (event_id, group) was not in processed_event before
	Reopened  bool    // a rejected invoice of the order now pending under this event
	Invoice   Invoice // the order's invoice, read locked
	// Found is false when the order has no invoice: the event's id was seen
	// before (for another order, since it opened nothing for this one), or
	// another order's invoice holds it as its key.
	Found bool
	// Attempt is not 0 when the reserve took the pending invoice's attempt
	// for this event: it may send the key, and settles with this id.
	Attempt int64
	// Wait, for a pending invoice whose attempt another path holds, is how
	// long that attempt may still live (0 when it ended meanwhile); for a
	// rejected invoice, how long an attempt under its key may still be in
	// flight (one a release without the fence made beside this one), before
	// which it is not reopened.
	Wait time.Duration
	// Held: this reserve held the invoice (its key past AttemptTerms.HoldAfter).
	Held bool
}

// Take is what TakeAttempt found.
type Take struct {
	Invoice Invoice // the order's invoice now
	Found   bool    // the order has an invoice
	Attempt int64   // not 0: the attempt is the caller's
	Wait    time.Duration
	Held    bool // the take held the invoice (its key past AttemptTerms.HoldAfter)
}

// Settlement is the gateway's answer to one attempt, for Settle.
type Settlement struct {
	OrderID  string
	Key      uuid.UUID     // the key that was sent
	Attempt  int64         // the attempt that sent it
	Status   InvoiceStatus // charged, declined, rejected or held
	ChargeID string        // charged: the gateway's charge id, "" when it did not say
	Reason   string        // rejected, held: one line on why
	// Answer is what the gateway answered, as the invoice's history of
	// answers records it (AnswerOf); "" records nothing.
	Answer string
}

// Ledger keeps the dedup table and the invoices. Each method is one
// database transaction, all or nothing; an implementation may run it again
// in place after a serialization failure or deadlock, and translates driver
// errors into OutageError / TransientError at its edge.
type Ledger interface {
	// Reserve, in one transaction: records (inv.EventID, group, inv.OrderID)
	// in processed_event (ON CONFLICT DO NOTHING, FirstSeen when it
	// inserted); when that row is new, inserts inv as the order's pending
	// invoice unless the order has one or another invoice holds inv.EventID
	// as its key; reopens the order's rejected invoice under inv (its key,
	// amount, currency, customer) when the row is new, or inv.EventID is
	// already that invoice's key, or the row existed for this same order,
	// and no other invoice holds the key; takes the attempt of the order's
	// pending invoice (a new one, a reopened one, or one pending before)
	// when no other attempt is alive and its key is not past
	// terms.HoldAfter, or holds it when it is; and reads the order's invoice
	// FOR UPDATE.
	Reserve(ctx context.Context, inv Invoice, group string, terms AttemptTerms) (Reservation, error)
	// TakeAttempt, in one transaction: takes the attempt of orderID's
	// invoice if it is pending under key with no other attempt alive and
	// its key not past terms.HoldAfter, or holds it when it is past; and
	// reads the invoice.
	TakeAttempt(ctx context.Context, orderID string, key uuid.UUID, terms AttemptTerms) (Take, error)
	// Settle moves the order's invoice, if it is pending under s.Key and no
	// attempt but s.Attempt can still be in flight, to s.Status, and reports
	// whether it did (false: it was settled already, reopened under another
	// key, or another path holds a live attempt).
	Settle(ctx context.Context, s Settlement) (bool, error)
	// Release ends attempt early: its request is over and nothing of it is
	// left at the gateway (it was answered, or never sent), which answer
	// says for the invoice's history of answers (AnswerOf; "" records
	// nothing). The invoice stays pending; another path may take its
	// attempt at once.
	Release(ctx context.Context, orderID string, key uuid.UUID, attempt int64, answer string) error
}

// ChargeRequest is one charge at the payment gateway.
type ChargeRequest struct {
	IdempotencyKey uuid.UUID // the invoice's EventID
	OrderID        string
	CustomerID     string
	Amount         Money
}

// ChargeStatus is the business answer of the gateway.
type ChargeStatus int

// Charge answers.
const (
	ChargeSucceeded ChargeStatus = iota + 1
	ChargeDeclined
)

// ChargeResult is what the gateway decided. ChargeID may be "" when the
// gateway only said the key was already processed (409).
type ChargeResult struct {
	Status   ChargeStatus
	ChargeID string
	Replayed bool // the gateway answered from an earlier request with this key
	// StatusCode is the HTTP status of the reply (0 when the gateway's
	// adapter does not say), for the invoice's history of answers.
	StatusCode int
}

// PaymentGateway charges money. Charge returns a ChargeResult for a success
// or a decline, a *TransientError for failures worth retrying, and a
// *PermanentError for requests the gateway will never accept.
type PaymentGateway interface {
	Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error)
}

// Resolution is a person's decision on an invoice (`billing invoice
// resolve`, `billing reconcile --resolve-held`; docs/interface.md §1, §7): what
// the gateway's own records show (charged, with the charge id found there;
// declined; rejected: no money moved, the order may be reopened), or
// pending: one more automatic attempt under its key, while the key is young
// enough (AttemptTerms.HoldAfter). It applies to a held invoice, or to a
// pending one whose key was first sent more than HoldAfter ago (the service
// should have held it: its completer is not running), and only while the
// invoice is under Key, the key whose records the person looked at.
type Resolution struct {
	Status   InvoiceStatus // charged, declined, rejected or pending
	ChargeID string        // charged: the charge id at the gateway
	// Key is the Idempotency-Key the person looked up at the gateway: the
	// decision is refused (ErrOtherKey) when the invoice is under another,
	// so a decision made on one attempt's records never settles a later
	// attempt under another key.
	Key uuid.UUID
	// By names who decided (1–64 printable characters); Note is theirs
	// (at most 512); both are kept with the decision.
	By, Note string
	// Command is the command that records it: CommandInvoiceResolve (the
	// default when empty) or CommandReconcileResolveHeld.
	Command string
	// Reopens, for CommandReconcileResolveHeld, is the invoice's Reopens
	// when the provider's records were read for it: a decision made from
	// them applies only to that attempt of the key (a held invoice resumed
	// by a person and held again is another, whose attempts those records
	// may not show).
	Reopens int
}

// The commands whose decisions on invoices are kept (the decision table's
// command column).
const (
	CommandInvoiceResolve       = "invoice resolve"
	CommandReconcileResolveHeld = "reconcile resolve-held"
)

// Errors of a resolution the ledger refuses.
var (
	// ErrNotHeld: the invoice is neither held nor pending past half of its
	// key's lifetime; nothing for a person to decide.
	ErrNotHeld = errors.New("invoice is not a person's to decide: it is neither held nor pending past half of BILLING_GATEWAY_KEY_TTL")
	// ErrKeyTooOld: --resume of an invoice whose key was first sent longer
	// ago than AttemptTerms.HoldAfter; the gateway may have forgotten it.
	ErrKeyTooOld = errors.New("its key was first sent more than half of BILLING_GATEWAY_KEY_TTL ago: resuming it could charge twice")
	// ErrNoInvoice: the order has no invoice.
	ErrNoInvoice = errors.New("order has no invoice")
	// ErrOtherKey: the invoice is under another key than the one the
	// person looked at; the decision would apply to an attempt whose
	// gateway records nobody read.
	ErrOtherKey = errors.New("the invoice is under another key than the one given")
)

// Outbox is where the invoice events of committed transitions wait to be
// published (docs/interface.md §9): written in the transition's own transaction,
// removed once published.
type Outbox interface {
	// PublishPending, in one transaction: claims up to limit events that
	// no other relay holds, the oldest of each order only (so one order's
	// events leave in the order of its transitions), calls publish with
	// them, and removes them when publish returns nil; when it returns an
	// error they stay, for the next pass. It returns how many it removed.
	PublishPending(ctx context.Context, limit int, publish func(ctx context.Context, events []InvoiceEvent) error) (int, error)
	// OutboxStats counts the events waiting and ages the oldest.
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// OutboxStats is what billing_outbox_pending and
// billing_outbox_oldest_seconds report.
type OutboxStats struct {
	Pending int
	Oldest  time.Duration // since the oldest waiting event's transition; 0 when none
}

// PendingStats is what billing_invoices_pending,
// billing_invoice_pending_oldest_seconds and billing_invoices_held report,
// and, read in the same pass, the last reconciliation's result
// (billing_reconcile_discrepancies, billing_reconcile_last_run_timestamp_seconds):
// the gauges the completer's pass reads from Postgres.
type PendingStats struct {
	Count  int
	Oldest time.Duration // how long the oldest pending invoice has been pending under its key; 0 when none
	Held   int           // invoices waiting for a person
	// Reconcile is the newest `billing reconcile` run kept in Postgres
	// (its At zero: none yet). A CronJob is never scraped: the pods
	// export its result.
	Reconcile ReconcileResult
}

// PendingClaim says which pending invoices a completer pass takes.
type PendingClaim struct {
	// OlderThan: pending under their current key for longer than this.
	OlderThan time.Duration
	// Limit bounds the invoices of one pass.
	Limit int
	// Backoff and MaxBackoff: a claimed invoice is not due again before
	// Backoff·2^(earlier claims), at most MaxBackoff. The wait is also the
	// claim itself: no other completer takes the invoice meanwhile.
	Backoff, MaxBackoff time.Duration
}

// PendingLedger is what the completer needs of the invoices.
type PendingLedger interface {
	// ClaimPending, in one transaction, takes the due invoices of c (oldest
	// first, skipping rows another transaction holds), moves each one's
	// next attempt past its back-off, and returns them.
	ClaimPending(ctx context.Context, c PendingClaim) ([]Invoice, error)
	// PendingStats counts the pending and the held invoices, ages the
	// oldest pending one, and reads the last reconciliation's result.
	PendingStats(ctx context.Context) (PendingStats, error)
	// HoldStale holds every pending invoice whose key was first sent more
	// than terms.HoldAfter ago and that no live attempt holds, and returns
	// their order ids: whatever back-off the completer gave them, they must
	// not wait pending for a send that will never come.
	HoldStale(ctx context.Context, terms AttemptTerms) ([]string, error)
}
