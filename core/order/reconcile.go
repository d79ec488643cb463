package order

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Reconciliation (`billing reconcile`, docs/interface.md §1): billing's invoices
// of a period against the payment provider's own records of attempts
// (PaymentRecords), both ways, so that money for an order billing never
// invoiced shows too. The rules are here, without I/O: what a difference
// is (Compare), which orders need the provider's whole history rather than
// the period's listing (NeedsLookup), which times to list (ReadRanges),
// and when a held invoice's outcome is beyond doubt (DecideHeld). The
// command reads the invoices and the records and applies them.

// DiscrepancyKind is one kind of difference between billing's invoices and
// the provider's records: the kind label of billing_reconcile_discrepancies.
type DiscrepancyKind string

// The discrepancy kinds (docs/interface.md §1).
const (
	// DiscrepancyMoneyWithoutCharged: the provider took money (a succeeded
	// record) for an order whose invoice is not charged with it: no
	// invoice at all (billing never invoiced the order), or one declined,
	// rejected, held, pending under another key, or charged with another
	// charge.
	DiscrepancyMoneyWithoutCharged DiscrepancyKind = "money_without_charged_invoice"
	// DiscrepancyChargedWithoutMoney: an invoice is charged, and no
	// succeeded record of the provider is its charge.
	DiscrepancyChargedWithoutMoney DiscrepancyKind = "charged_invoice_without_money"
	// DiscrepancyAmountMismatch: a charged invoice's charge took another
	// amount or another currency than the invoice says.
	DiscrepancyAmountMismatch DiscrepancyKind = "amount_mismatch"
	// DiscrepancyDoubleCharge: more than one succeeded record for one
	// order, under any keys.
	DiscrepancyDoubleCharge DiscrepancyKind = "double_charge"
)

// DiscrepancyKinds returns every kind, in the order reports list them.
func DiscrepancyKinds() []DiscrepancyKind {
	return []DiscrepancyKind{DiscrepancyDoubleCharge, DiscrepancyMoneyWithoutCharged, DiscrepancyChargedWithoutMoney, DiscrepancyAmountMismatch}
}

// Period is the half-open interval [From, To).
type Period struct{ From, To time.Time }

// Contains reports whether t is in p.
func (p Period) Contains(t time.Time) bool { return !t.Before(p.From) && t.Before(p.To) }

// String is p in RFC 3339, UTC.
func (p Period) String() string {
	return p.From.UTC().Format(time.RFC3339Nano) + " – " + p.To.UTC().Format(time.RFC3339Nano)
}

// ReadRanges returns the periods whose records a reconciliation of p,
// run at now, lists (PaymentRecords.ChargesCreated) for a provider whose
// lookup of one order (ChargesOfOrder) may miss the attempts younger than
// lag: p itself, and the last lag before now, which the lookup cannot be
// trusted with (Stripe's search, stripe.SearchLag). The lookup then sees
// every attempt the listing does not, so that together they are every
// attempt of an order. Overlapping or touching periods are merged; none is
// empty.
func ReadRanges(p Period, now time.Time, lag time.Duration) []Period {
	ranges := []Period{p}
	if lag > 0 {
		recent := Period{From: now.Add(-lag), To: now}
		switch {
		case !recent.From.After(p.To) && !recent.To.Before(p.From): // they overlap or touch
			ranges[0] = Period{From: minTime(p.From, recent.From), To: maxTime(p.To, recent.To)}
		default:
			ranges = append(ranges, recent)
			slices.SortFunc(ranges, func(a, b Period) int { return a.From.Compare(b.From) })
		}
	}
	return slices.DeleteFunc(ranges, func(r Period) bool { return !r.From.Before(r.To) })
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// OrderRecords is what a reconciliation knows of one order: billing's
// invoice, and the provider's records of attempts for it.
type OrderRecords struct {
	OrderID string
	// Invoice is the order's invoice; nil when billing has none.
	Invoice *Invoice
	// Records are the provider's attempts for the order that the listing
	// of the period showed, or, once Complete, every attempt it recorded.
	Records []PaymentRecord
	// Complete: Records are every attempt (the listing and the lookup of
	// the order together), not only those of the listed periods.
	Complete bool
}

// Merge adds to o the records of rs it does not have (by charge id) and
// marks it Complete: rs is the order's lookup. Records stay oldest first.
func (o *OrderRecords) Merge(rs []PaymentRecord) {
	have := make(map[string]bool, len(o.Records))
	for _, r := range o.Records {
		have[r.ChargeID] = true
	}
	for _, r := range rs {
		if r.OrderID == o.OrderID && !have[r.ChargeID] {
			have[r.ChargeID] = true
			o.Records = append(o.Records, r)
		}
	}
	slices.SortStableFunc(o.Records, func(a, b PaymentRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
	o.Complete = true
}

// Discrepancy is one difference Compare found.
type Discrepancy struct {
	Kind    DiscrepancyKind
	OrderID string
	// Invoice is the order's invoice as compared (nil: none).
	Invoice *Invoice
	// Records are the provider's records concerned: the charges of a
	// double charge, the money without a charged invoice, the charge of an
	// amount mismatch; none for a charged invoice without money.
	Records []PaymentRecord
}

// String is d on one line, for a person: the kind, the order, the
// provider's records concerned and the invoice. Every field in it passed
// its rule (a charge id is printable ASCII, an order id has no control
// character), so nothing of the provider's own text is in it.
func (d Discrepancy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s order %s: ", d.Kind, d.OrderID)
	switch d.Kind {
	case DiscrepancyDoubleCharge:
		fmt.Fprintf(&b, "%d successful charges: ", len(d.Records))
	case DiscrepancyMoneyWithoutCharged:
		b.WriteString("money taken: ")
	case DiscrepancyAmountMismatch:
		b.WriteString("its charge took another amount or currency: ")
	case DiscrepancyChargedWithoutMoney:
		b.WriteString("no successful charge at the provider is its charge")
	}
	for i, r := range d.Records {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(DescribeRecord(r))
	}
	b.WriteString("; ")
	b.WriteString(describeInvoice(d.Invoice))
	return b.String()
}

// DescribeRecord is one provider record for a person: "ch_1 12990 EUR
// succeeded under key K at T".
func DescribeRecord(r PaymentRecord) string {
	key := r.Key
	if key == "" {
		key = "(not said)"
	}
	return fmt.Sprintf("%s %s %s under key %s at %s", r.ChargeID, r.Amount, r.Status, key, r.CreatedAt.UTC().Format(time.RFC3339))
}

// describeInvoice is the invoice side of a discrepancy's line.
func describeInvoice(inv *Invoice) string {
	if inv == nil {
		return "billing has no invoice for the order"
	}
	s := fmt.Sprintf("invoice %s %d %s under key %s", inv.Status, inv.Amount, inv.Currency, inv.EventID)
	if inv.ChargeID != "" {
		s += ", charge " + inv.ChargeID
	}
	return s
}

// Compare returns the discrepancies of one order, from what o holds:
//
//   - the charged invoice's charge is the succeeded record with its charge
//     id (or, for an invoice charged without one, the record under its
//     key); none: DiscrepancyChargedWithoutMoney; one of another amount or
//     currency: DiscrepancyAmountMismatch;
//   - two succeeded records or more, under any keys: DiscrepancyDoubleCharge;
//   - else one succeeded record that is not the charged invoice's charge:
//     DiscrepancyMoneyWithoutCharged, unless the invoice is pending under
//     that record's key (billing's charge, not settled yet: the service
//     settles it under that key).
//
// Declined, refused and pending records are not money: they differ from
// nothing. Before o is Complete, a discrepancy may only say that the
// listing did not hold the whole story (NeedsLookup).
func Compare(o OrderRecords) []Discrepancy {
	var succeeded []PaymentRecord
	for _, r := range o.Records {
		if r.Status == RecordSucceeded {
			succeeded = append(succeeded, r)
		}
	}
	inv := o.Invoice
	var out []Discrepancy
	matched := -1
	if inv != nil && inv.Status == StatusCharged {
		matched = slices.IndexFunc(succeeded, func(r PaymentRecord) bool { return chargeOf(*inv, r, len(succeeded)) })
		switch {
		case matched < 0:
			out = append(out, Discrepancy{Kind: DiscrepancyChargedWithoutMoney, OrderID: o.OrderID, Invoice: inv})
		case succeeded[matched].Amount != (Money{Amount: inv.Amount, Currency: inv.Currency}):
			out = append(out, Discrepancy{Kind: DiscrepancyAmountMismatch, OrderID: o.OrderID, Invoice: inv, Records: succeeded[matched : matched+1]})
		}
	}
	switch {
	case len(succeeded) >= 2:
		out = append(out, Discrepancy{Kind: DiscrepancyDoubleCharge, OrderID: o.OrderID, Invoice: inv, Records: succeeded})
	case len(succeeded) == 1 && matched < 0:
		if inv != nil && inv.Status == StatusPending && succeeded[0].Key == inv.EventID.String() {
			break // being settled under its key
		}
		out = append(out, Discrepancy{Kind: DiscrepancyMoneyWithoutCharged, OrderID: o.OrderID, Invoice: inv, Records: succeeded})
	}
	return out
}

// chargeOf reports whether r is the charge of the charged invoice inv:
// the record of its charge id; for an invoice charged without one (a 409
// without an id), the record under its key, or the only succeeded record
// when the provider does not say the key.
func chargeOf(inv Invoice, r PaymentRecord, succeeded int) bool {
	if inv.ChargeID != "" {
		return r.ChargeID == inv.ChargeID
	}
	return r.Key == inv.EventID.String() || (r.Key == "" && succeeded == 1)
}

// NeedsLookup reports whether o, read from the listing alone, needs the
// order's whole history from the provider (ChargesOfOrder) before any
// conclusion: it shows a discrepancy (which a record outside the listed
// periods may explain, or make a double charge), or its invoice is held
// (deciding it needs every attempt under its key). An order whose
// listing agrees with its invoice costs no lookup: on a normal day, every
// order but a few.
func NeedsLookup(o OrderRecords) bool {
	if o.Complete {
		return false
	}
	return (o.Invoice != nil && o.Invoice.Status == StatusHeld) || len(Compare(o)) > 0
}

// HeldDecision is what DecideHeld concluded for a held invoice.
type HeldDecision struct {
	// Settle is true when the provider's records show the outcome beyond
	// doubt: Status (charged, with ChargeID; or declined) is then the
	// decision to record.
	Settle   bool
	Status   InvoiceStatus
	ChargeID string
	// Why says, in one line, what the records under the invoice's key
	// show, and so why it is settled or left held.
	Why string
}

// DecideHeld says whether the provider's records settle the held invoice
// inv beyond doubt, from o, the order's Complete records (the listing and
// the lookup): only the records under inv's key count (every attempt the
// provider made under it, kept longer than the key), and
//
//   - exactly one succeeded, none still pending: charged, with its id;
//   - none succeeded, none pending, at least one declined: declined (an
//     executed attempt under the key declined, and no other executed
//     attempt under it took money);
//   - anything else stays held: two successes under one key (which one
//     is the charge?), an attempt not final at the provider, a record of
//     the order that does not say its key, or no executed attempt at all.
//
// "No charge" is never concluded here, from refusals or from absence: the
// 422 that held an invoice says the provider executed a request under the
// key, so records without one are records that do not show everything
// (the search lags, a record's metadata was lost, the provider keeps its
// records for a time it does not promise); and an absence cannot tell
// "never executed" from "executed, not shown". Rejecting would let the
// order's next event charge it under a new key. A person decides those
// (`billing invoice resolve --rejected`), from the provider's dashboard.
// docs/design.md, "Reconciliation".
func DecideHeld(inv Invoice, o OrderRecords) HeldDecision {
	key := inv.EventID.String()
	if !o.Complete {
		return HeldDecision{Why: "the provider's records of the order were not read whole"}
	}
	var succeeded, declined, refused, pending, unsaid []PaymentRecord
	for _, r := range o.Records {
		if r.Key == "" {
			unsaid = append(unsaid, r)
			continue
		}
		if r.Key != key {
			continue
		}
		switch r.Status {
		case RecordSucceeded:
			succeeded = append(succeeded, r)
		case RecordDeclined:
			declined = append(declined, r)
		case RecordRefused:
			refused = append(refused, r)
		default:
			pending = append(pending, r)
		}
	}
	switch {
	case len(unsaid) > 0:
		return HeldDecision{Why: fmt.Sprintf("%d attempt(s) of the order at the provider do not say their key: %s", len(unsaid), describeRecords(unsaid))}
	case len(pending) > 0:
		return HeldDecision{Why: "an attempt under its key is not final at the provider: " + describeRecords(pending)}
	case len(succeeded) > 1:
		return HeldDecision{Why: fmt.Sprintf("%d successful charges under its key: %s", len(succeeded), describeRecords(succeeded))}
	case len(succeeded) == 1:
		return HeldDecision{Settle: true, Status: StatusCharged, ChargeID: succeeded[0].ChargeID,
			Why: "one successful charge under its key: " + DescribeRecord(succeeded[0])}
	case len(declined) > 0:
		return HeldDecision{Settle: true, Status: StatusDeclined,
			Why: "declined under its key, no charge: " + describeRecords(declined)}
	case len(refused) > 0:
		return HeldDecision{Why: "only refused attempts under its key (no money moved by them; a refusal is not proof that no other request under it ran: a person decides): " + describeRecords(refused)}
	}
	return HeldDecision{Why: "no attempt recorded under its key (absence is not proof that none ran: a person decides)"}
}

// describeRecords joins DescribeRecord of rs.
func describeRecords(rs []PaymentRecord) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = DescribeRecord(r)
	}
	return strings.Join(parts, ", ")
}

// SortDiscrepancies orders ds as reports list them: by kind
// (DiscrepancyKinds' order), then by order id.
func SortDiscrepancies(ds []Discrepancy) {
	rank := map[DiscrepancyKind]int{}
	for i, k := range DiscrepancyKinds() {
		rank[k] = i
	}
	slices.SortStableFunc(ds, func(a, b Discrepancy) int {
		return cmp.Or(cmp.Compare(rank[a.Kind], rank[b.Kind]), strings.Compare(a.OrderID, b.OrderID))
	})
}

// ReconcileResult is a reconciliation's result, as kept in Postgres and
// exported by the service (billing_reconcile_discrepancies{kind},
// billing_reconcile_last_run_timestamp_seconds).
type ReconcileResult struct {
	// At is when the run finished (zero: no run yet).
	At     time.Time
	Period Period
	Orders int
	// Discrepancies counts them by kind (every kind present, 0 included).
	Discrepancies map[DiscrepancyKind]int
	// HeldSettled and HeldLeft count the held invoices of the run settled
	// by --resolve-held and left held.
	HeldSettled, HeldLeft int
}

// Total is the number of discrepancies of every kind.
func (r ReconcileResult) Total() int {
	n := 0
	for _, c := range r.Discrepancies {
		n += c
	}
	return n
}

// CountDiscrepancies counts ds by kind, every kind present.
func CountDiscrepancies(ds []Discrepancy) map[DiscrepancyKind]int {
	counts := make(map[DiscrepancyKind]int, 4)
	for _, k := range DiscrepancyKinds() {
		counts[k] = 0
	}
	for _, d := range ds {
		counts[d.Kind]++
	}
	return counts
}
