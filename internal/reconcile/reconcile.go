// Package reconcile is `billing reconcile` (docs/interface.md §1; docs/design.md,
// "Reconciliation"): the invoices of a period against the payment
// provider's own records of the same period, both ways, the held invoices
// the records decide settled as a decision (with --resolve-held), and the
// run's result kept in Postgres for the service to export. The rules are
// core/order's (Compare, NeedsLookup, ReadRanges, DecideHeld); this package
// reads the invoices and the records, applies them and writes the report.
// `billing demo` runs it too.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
)

// maxNoteChars bounds a decision's note (docs/interface.md §1; the decision
// table's check).
const maxNoteChars = 512

// Options says what one run compares and decides.
type Options struct {
	Period order.Period
	// ResolveHeld settles the held invoices the records decide, each as a
	// decision by By.
	ResolveHeld bool
	// By names who runs it (1–64 printable characters; "" when not given):
	// kept with the run, and with each decision.
	By string
	// HoldAfter is order.AttemptTerms.HoldAfter, which a decision's store
	// path needs (Store.Resolve); RunConfigured sets it.
	HoldAfter time.Duration
	// Provider and Host are kept with the run: the payment provider
	// (config.ProviderGeneric or config.ProviderStripe; RunConfigured sets
	// it), where it ran.
	Provider, Host string
}

// Report is one run: what it read, what it decided, what it found, and
// the result kept in Postgres.
type Report struct {
	opts Options

	Invoices, Listed, Foreign, Pages, Lookups int
	Discrepancies                             []order.Discrepancy
	Held                                      []HeldOutcome
	// Result is what was kept in Postgres, At its time there.
	Result order.ReconcileResult

	orders map[string]*order.OrderRecords
}

// HeldOutcome is what became of one held invoice.
type HeldOutcome struct {
	Invoice  order.Invoice // as read
	Decision order.HeldDecision
	Settled  bool
	After    order.Invoice // when settled
	Refused  error         // the decision was refused: the invoice moved on since it was read
}

// RunConfigured runs Run as `billing reconcile` does, from cfg (the
// database, the gateway and the rules): on a pool of one connection (an
// operator's command fits the connection budget at full scale,
// deploy/README.md "Connection arithmetic"), with the payment adapter
// BILLING_PAYMENT_PROVIDER names, and the provider and the attempt's terms
// taken from cfg; o says the rest.
func RunConfigured(ctx context.Context, cfg config.Config, log *slog.Logger, o Options, now time.Time) (*Report, error) {
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	gw, err := app.NewGateway(cfg, log, nil, app.Tuning{})
	if err != nil {
		return nil, err
	}
	defer gw.CloseIdleConnections()
	o.Provider = config.ProviderGeneric
	if strings.EqualFold(cfg.PaymentProvider, config.ProviderStripe) {
		o.Provider = config.ProviderStripe
	}
	o.HoldAfter = order.NewAttemptTerms(cfg.PaymentTimeout, cfg.GatewayKeyTTL).HoldAfter
	// Its decisions are transitions: their invoice events go to the
	// outbox, for the running pods' relay to publish.
	return Run(ctx, postgres.NewStore(pool, postgres.WithEvents(cfg.PublishEvents)), gw, o, now)
}

// Run reconciles o.Period at now: it reads the period's invoices and the
// provider's records, looks up the orders that need their whole history,
// settles the held invoices when asked, compares every order, and keeps
// the result (Store.RecordReconcile). An error of Postgres or of the
// provider ends the run and keeps nothing.
func Run(ctx context.Context, store *postgres.Store, records order.PaymentRecords, o Options, now time.Time) (*Report, error) {
	r := &Report{opts: o}
	if err := r.run(ctx, store, records, now); err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", o.Period, err)
	}
	r.Result = order.ReconcileResult{Period: o.Period, Orders: len(r.orders), Discrepancies: order.CountDiscrepancies(r.Discrepancies)}
	for _, h := range r.Held {
		if h.Settled {
			r.Result.HeldSettled++
		} else {
			r.Result.HeldLeft++
		}
	}
	at, err := store.RecordReconcile(ctx, postgres.ReconcileRun{ReconcileResult: r.Result, Started: now,
		Provider: o.Provider, By: o.By, Host: o.Host})
	if err != nil {
		return nil, err
	}
	r.Result.At = at
	return r, nil
}

// run reads, decides and compares.
func (r *Report) run(ctx context.Context, store *postgres.Store, records order.PaymentRecords, now time.Time) error {
	p := r.opts.Period
	invs, err := store.InvoicesCreated(ctx, p)
	if err != nil {
		return err
	}
	r.Invoices = len(invs)
	recs, err := r.list(ctx, records, order.ReadRanges(p, now, order.LookupLag(records)))
	if err != nil {
		return err
	}
	// The orders of the period: those invoiced in it, and those the
	// provider recorded an attempt for in it (billing may never have
	// invoiced them, or earlier).
	r.orders = map[string]*order.OrderRecords{}
	for i := range invs {
		r.orders[invs[i].OrderID] = &order.OrderRecords{OrderID: invs[i].OrderID, Invoice: &invs[i]}
	}
	var older []string
	for _, rec := range recs {
		if _, ok := r.orders[rec.OrderID]; !ok && p.Contains(rec.CreatedAt) {
			r.orders[rec.OrderID] = &order.OrderRecords{OrderID: rec.OrderID}
			older = append(older, rec.OrderID)
		}
	}
	for _, rec := range recs {
		if o, ok := r.orders[rec.OrderID]; ok {
			o.Records = append(o.Records, rec)
		}
	}
	found, err := store.InvoicesOf(ctx, older)
	if err != nil {
		return err
	}
	for i := range found {
		r.orders[found[i].OrderID].Invoice = &found[i]
	}
	ids := slices.Sorted(maps.Keys(r.orders))
	for _, id := range ids {
		o := r.orders[id]
		if !order.NeedsLookup(*o) {
			continue
		}
		all, err := records.ChargesOfOrder(ctx, id)
		if err != nil {
			return err
		}
		r.Lookups++
		o.Merge(all)
	}
	for _, id := range ids {
		if o := r.orders[id]; o.Invoice != nil && o.Invoice.Status == order.StatusHeld {
			if err := r.decide(ctx, store, o); err != nil {
				return err
			}
		}
	}
	for _, id := range ids {
		r.Discrepancies = append(r.Discrepancies, order.Compare(*r.orders[id])...)
	}
	order.SortDiscrepancies(r.Discrepancies)
	return nil
}

// list reads every page of the provider's records created in ranges.
func (r *Report) list(ctx context.Context, records order.PaymentRecords, ranges []order.Period) ([]order.PaymentRecord, error) {
	var out []order.PaymentRecord
	have := map[string]bool{}
	for _, rg := range ranges {
		cursor := ""
		cursors := map[string]bool{}
		for {
			page, err := records.ChargesCreated(ctx, rg.From, rg.To, cursor)
			if err != nil {
				return nil, err
			}
			r.Pages++
			r.Foreign += page.Foreign
			for _, rec := range page.Records {
				if !have[rec.ChargeID] {
					have[rec.ChargeID] = true
					out = append(out, rec)
				}
			}
			if page.Next == "" {
				break
			}
			if cursors[page.Next] {
				return nil, fmt.Errorf("the provider's list of %s gave a cursor it gave before: it would never end", rg)
			}
			cursors[page.Next], cursor = true, page.Next
		}
	}
	r.Listed = len(out)
	return out, nil
}

// decide settles o's held invoice when ResolveHeld asks and the records
// decide it (order.DecideHeld), through the path of a person's decision
// (Store.Resolve: the invoice's attempt taken, the key the records were
// read for, the decision kept, its invoice event written). A decision the
// store refuses (the invoice moved on since it was read) leaves it as it
// is, reported.
func (r *Report) decide(ctx context.Context, store *postgres.Store, o *order.OrderRecords) error {
	inv := *o.Invoice
	h := HeldOutcome{Invoice: inv, Decision: order.DecideHeld(inv, *o)}
	if r.opts.ResolveHeld && h.Decision.Settle {
		d := order.Resolution{Status: h.Decision.Status, ChargeID: h.Decision.ChargeID, Key: inv.EventID, By: r.opts.By,
			Note: decisionNote(r.opts.Period, h.Decision.Why), Command: order.CommandReconcileResolveHeld, Reopens: inv.Reopens}
		_, after, err := store.Resolve(ctx, inv.OrderID, d, r.opts.HoldAfter)
		var busy *order.AttemptBusyError
		switch {
		case err == nil:
			h.Settled, h.After = true, after
			o.Invoice = &after
		case errors.Is(err, order.ErrOtherKey), errors.Is(err, order.ErrNotHeld), errors.Is(err, order.ErrNoInvoice), errors.As(err, &busy):
			h.Refused = err
		default:
			return err
		}
	}
	r.Held = append(r.Held, h)
	return nil
}

// decisionNote is the note kept with a decision of reconcile: the period
// and why, within a note's 512 characters.
func decisionNote(p order.Period, why string) string {
	note := "billing reconcile " + p.String() + ": " + why
	if utf8.RuneCountInString(note) > maxNoteChars {
		note = string([]rune(note)[:maxNoteChars-1]) + "…"
	}
	return note
}

// Summary is the run's last line: "reconciled N orders: M discrepancies".
func (r *Report) Summary() string {
	return fmt.Sprintf("reconciled %d orders: %d discrepancies", r.Result.Orders, r.Result.Total())
}

// Print writes the run for a person: what was read, one line per
// discrepancy, one per held invoice, and the summary line last.
func (r *Report) Print(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "reconcile %s, provider %s: %d invoices, %d records listed (%d not billing's) in %d pages, %d orders looked up\n",
		r.opts.Period, r.opts.Provider, r.Invoices, r.Listed, r.Foreign, r.Pages, r.Lookups)
	for _, d := range r.Discrepancies {
		b.WriteString(d.String() + "\n")
	}
	for _, h := range r.Held {
		fmt.Fprintf(&b, "held order %s (key %s): %s\n", h.Invoice.OrderID, h.Invoice.EventID, h.line(r.opts.ResolveHeld))
	}
	b.WriteString(r.Summary() + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// line says what became of a held invoice, and why.
func (h HeldOutcome) line(resolving bool) string {
	d := h.Decision
	switch {
	case h.Settled:
		s := "settled " + string(h.After.Status)
		if h.After.ChargeID != "" {
			s += ", charge " + h.After.ChargeID
		}
		return s + ": " + d.Why
	case h.Refused != nil:
		return "left held: it changed since its records were read (" + h.Refused.Error() + ")"
	case d.Settle && !resolving:
		return "would be settled " + string(d.Status) + " by --resolve-held: " + d.Why
	}
	return "left held: " + d.Why
}

// JSON is `billing reconcile --json`.
type JSON struct {
	From          time.Time         `json:"from"`
	To            time.Time         `json:"to"`
	Provider      string            `json:"provider"`
	Orders        int               `json:"orders"`
	Invoices      int               `json:"invoices"`
	Listed        int               `json:"records_listed"`
	Foreign       int               `json:"records_not_billings"`
	Lookups       int               `json:"orders_looked_up"`
	Counts        map[string]int    `json:"discrepancy_counts"`
	Total         int               `json:"discrepancies_total"`
	Discrepancies []DiscrepancyJSON `json:"discrepancies"`
	Held          []HeldJSON        `json:"held"`
	RecordedAt    time.Time         `json:"recorded_at"`
}

// DiscrepancyJSON is one discrepancy in JSON.
type DiscrepancyJSON struct {
	Kind    string       `json:"kind"`
	OrderID string       `json:"order_id"`
	Invoice *InvoiceJSON `json:"invoice"` // null: billing has none
	Records []RecordJSON `json:"records"`
	Line    string       `json:"line"`
}

// InvoiceJSON is the invoice side of a discrepancy.
type InvoiceJSON struct {
	Status   string `json:"status"`
	Key      string `json:"key"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	ChargeID string `json:"charge_id,omitempty"`
}

// RecordJSON is one provider record of a discrepancy.
type RecordJSON struct {
	ChargeID  string    `json:"charge_id"`
	Key       string    `json:"key"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// HeldJSON is what became of one held invoice.
type HeldJSON struct {
	OrderID  string `json:"order_id"`
	Key      string `json:"key"`
	Settled  bool   `json:"settled"`
	Status   string `json:"status"` // the status after: held when left
	ChargeID string `json:"charge_id,omitempty"`
	Why      string `json:"why"`
}

// PrintJSON writes the run as one JSON object.
func (r *Report) PrintJSON(w io.Writer) error {
	out := JSON{From: r.opts.Period.From, To: r.opts.Period.To, Provider: r.opts.Provider, Orders: r.Result.Orders, Invoices: r.Invoices,
		Listed: r.Listed, Foreign: r.Foreign, Lookups: r.Lookups, Counts: map[string]int{}, Total: r.Result.Total(),
		Discrepancies: []DiscrepancyJSON{}, Held: []HeldJSON{}, RecordedAt: r.Result.At}
	for k, n := range r.Result.Discrepancies {
		out.Counts[string(k)] = n
	}
	for _, d := range r.Discrepancies {
		dj := DiscrepancyJSON{Kind: string(d.Kind), OrderID: d.OrderID, Records: []RecordJSON{}, Line: d.String()}
		if d.Invoice != nil {
			dj.Invoice = &InvoiceJSON{Status: string(d.Invoice.Status), Key: d.Invoice.EventID.String(), Amount: d.Invoice.Amount,
				Currency: d.Invoice.Currency, ChargeID: d.Invoice.ChargeID}
		}
		for _, rec := range d.Records {
			dj.Records = append(dj.Records, RecordJSON{ChargeID: rec.ChargeID, Key: rec.Key, Amount: rec.Amount.Amount,
				Currency: rec.Amount.Currency, Status: string(rec.Status), CreatedAt: rec.CreatedAt})
		}
		out.Discrepancies = append(out.Discrepancies, dj)
	}
	for _, h := range r.Held {
		hj := HeldJSON{OrderID: h.Invoice.OrderID, Key: h.Invoice.EventID.String(), Settled: h.Settled, Status: string(order.StatusHeld),
			Why: h.line(r.opts.ResolveHeld)}
		if h.Settled {
			hj.Status, hj.ChargeID = string(h.After.Status), h.After.ChargeID
		}
		out.Held = append(out.Held, hj)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
