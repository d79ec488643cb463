package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
)

// What a person reads before deciding (docs/interface.md §1): `billing invoice
// list` and `billing invoice show`, in text for a person and in JSON
// (--json) for a script. Nothing in a runbook needs psql.

const (
	invoiceListSynopsis = "[--status S] [--older-than D] [--limit N] [--json]"
	invoiceListHelp     = `Held invoices first (waiting for a person), then pending (waiting for the service), each
oldest first; then rejected and the settled ones, newest first. AGE is how long the invoice
has been in its status (a pending one: since its key started).
--status S       only pending, held, rejected, charged or declined invoices
--older-than D   only those in their status for at least D (e.g. 30m, 12h)
--limit N        at most N invoices (default 50, at most 1000)
--json           one JSON array, for scripts`
	invoiceShowSynopsis = "ORDER_ID [--json]"
	invoiceShowHelp     = `The invoice with its key (the Idempotency-Key to look up at the gateway), when the key was
first sent and when half of BILLING_GATEWAY_KEY_TTL has passed, its attempts (the one in
flight and its deadline, the pending completer's resumes), its reason, the gateway's answers
recorded for it (the newest 16), every decision made on it, and what can be decided now.
--json  one JSON object, for scripts`
)

// defaultListLimit and maxListLimit bound `billing invoice list`.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// invoiceList implements `billing invoice list`.
func invoiceList(ctx context.Context, cfg config.Config, _ *slog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("invoice list", stderr)
	status := fs.String("status", "", "only invoices in this status")
	olderThan := fs.Duration("older-than", 0, "only invoices in their status for at least this long")
	limit := fs.Int("limit", defaultListLimit, "at most this many invoices")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	f := postgres.InvoiceFilter{Status: order.InvoiceStatus(*status), OlderThan: *olderThan, Limit: *limit}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("invoice list: unexpected argument %q", fs.Arg(0)[:min(len(fs.Arg(0)), 64)])
	case f.Status != "" && f.Status != order.StatusPending && !f.Status.Final():
		return fmt.Errorf("invoice list: --status %q: want pending, held, rejected, charged or declined", *status)
	case f.OlderThan < 0:
		return errors.New("invoice list: --older-than: must not be negative")
	case f.Limit < 1 || f.Limit > maxListLimit:
		return fmt.Errorf("invoice list: --limit %d: want 1 to %d", f.Limit, maxListLimit)
	}
	store, done, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	list, err := store.ListInvoices(ctx, f)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]invoiceJSON, 0, len(list))
		for _, s := range list {
			out = append(out, summaryJSON(s))
		}
		return writeJSON(stdout, out)
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no invoice matches")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tAGE\tORDER\tKEY\tAMOUNT\tRESUMES\tREASON")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d %s\t%d\t%s\n", s.Status, age(s.Age), s.OrderID, s.EventID, s.Amount, s.Currency,
			s.ResumeAttempts, cut(s.Reason, 60))
	}
	return tw.Flush()
}

// invoiceShow implements `billing invoice show`.
func invoiceShow(ctx context.Context, cfg config.Config, _ *slog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("invoice show", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return errUsage
	}
	if len(pos) > 1 {
		return fmt.Errorf("invoice show: unexpected argument %q", pos[1][:min(len(pos[1]), 64)])
	}
	var orderID string
	if len(pos) == 1 {
		orderID = pos[0]
	}
	if orderID == "" {
		return errors.New("invoice show: ORDER_ID is required")
	}
	if orderID, err = orderIDArg(orderID); err != nil {
		return fmt.Errorf("invoice show: %w", err)
	}
	store, done, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	d, err := store.ShowInvoice(ctx, orderID)
	if err != nil {
		return err
	}
	v := detailJSON(d, order.NewAttemptTerms(cfg.PaymentTimeout, cfg.GatewayKeyTTL).HoldAfter)
	if *asJSON {
		return writeJSON(stdout, v)
	}
	printDetail(stdout, v)
	return nil
}

// openStore opens a pool of one connection for a command that reads.
func openStore(ctx context.Context, cfg config.Config) (*postgres.Store, func(), error) {
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 1)
	if err != nil {
		return nil, nil, err
	}
	return postgres.NewStore(pool), pool.Close, nil
}

// invoiceJSON is an invoice as `billing invoice list --json` prints it,
// and the first part of `billing invoice show --json`. Times are RFC 3339
// in UTC, ages in seconds.
type invoiceJSON struct {
	OrderID        string    `json:"order_id"`
	Status         string    `json:"status"`
	Key            string    `json:"key"` // the Idempotency-Key (invoice.event_id)
	CustomerID     string    `json:"customer_id"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	ChargeID       string    `json:"charge_id,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Since          time.Time `json:"since"` // when it reached its status (pending: when its key started)
	AgeSeconds     float64   `json:"age_seconds"`
	KeySentAt      time.Time `json:"key_sent_at,omitzero"`
	CreatedAt      time.Time `json:"created_at"`
	ResumeAttempts int       `json:"resume_attempts"`
	Reopens        int       `json:"reopens"`
}

func summaryJSON(s postgres.InvoiceSummary) invoiceJSON {
	return invoiceJSON{
		OrderID: s.OrderID, Status: string(s.Status), Key: s.EventID.String(), CustomerID: s.CustomerID,
		Amount: s.Amount, Currency: s.Currency, ChargeID: s.ChargeID, Reason: s.Reason,
		Since: s.Since.UTC(), AgeSeconds: s.Age.Seconds(), KeySentAt: s.KeySentAt.UTC(), CreatedAt: s.CreatedAt.UTC(),
		ResumeAttempts: s.ResumeAttempts, Reopens: s.Reopens,
	}
}

// detailOut is `billing invoice show --json`.
type detailOut struct {
	invoiceJSON
	Now time.Time `json:"now"` // Postgres's clock, which every deadline here is on
	// HalfKeyTTLAt is when half of BILLING_GATEWAY_KEY_TTL has passed
	// since the key was first sent: the service holds a pending invoice
	// then, and --resume is refused from then on.
	HalfKeyTTLAt  time.Time       `json:"half_key_ttl_at,omitzero"`
	Attempt       attemptJSON     `json:"attempt"`
	NextResumeAt  time.Time       `json:"next_resume_at,omitzero"`
	Answers       []answerJSON    `json:"gateway_answers"`
	Decisions     []decisionJSON  `json:"decisions"`
	OutboxWaiting int             `json:"outbox_waiting"`
	Decide        string          `json:"decide"` // what a person can decide now, in a sentence
	decision      decisionAllowed // for the text form
	holdAfter     time.Duration   //
	raw           postgres.InvoiceDetail
}

type attemptJSON struct {
	ID    int64     `json:"id,omitempty"`
	Until time.Time `json:"until,omitzero"` // when it ends, by Postgres's clock
	Alive bool      `json:"alive"`
}

type answerJSON struct {
	At     time.Time `json:"at,omitzero"`
	Key    string    `json:"key,omitempty"`
	Answer string    `json:"answer"`
}

type decisionJSON struct {
	At       time.Time `json:"at"`
	By       string    `json:"by"`
	Command  string    `json:"command"`
	Key      string    `json:"key"`
	Before   string    `json:"status_before"`
	After    string    `json:"status_after"`
	ChargeID string    `json:"charge_id,omitempty"`
	Reason   string    `json:"reason_before,omitempty"`
	Note     string    `json:"note,omitempty"`
}

// decisionAllowed is what `billing invoice resolve` takes on an invoice now.
type decisionAllowed int

const (
	decideNothing  decisionAllowed = iota // not a person's to decide
	decideWait                            // a person's, once its attempt in flight has ended
	decideAny                             // --charged, --declined, --rejected, --resume
	decideNoResume                        // all but --resume: its key is past half of its lifetime
)

func detailJSON(d postgres.InvoiceDetail, holdAfter time.Duration) detailOut {
	v := detailOut{invoiceJSON: summaryJSON(d.InvoiceSummary), Now: d.Now.UTC(), NextResumeAt: d.NextResumeAt.UTC(),
		OutboxWaiting: d.OutboxWaiting, holdAfter: holdAfter, raw: d,
		Attempt:   attemptJSON{ID: d.AttemptID, Until: d.AttemptUntil.UTC(), Alive: d.AttemptAlive},
		Answers:   []answerJSON{},
		Decisions: []decisionJSON{}}
	if !d.KeySentAt.IsZero() && holdAfter > 0 {
		v.HalfKeyTTLAt = d.KeySentAt.Add(holdAfter).UTC()
	}
	for _, a := range d.Answers {
		k := ""
		if !a.At.IsZero() {
			k = a.Key.String()
		}
		v.Answers = append(v.Answers, answerJSON{At: a.At.UTC(), Key: k, Answer: a.Answer})
	}
	for _, dc := range d.Decisions {
		v.Decisions = append(v.Decisions, decisionJSON{At: dc.At.UTC(), By: dc.By, Command: dc.Command, Key: dc.Key.String(),
			Before: dc.Before, After: dc.After, ChargeID: dc.ChargeID, Reason: dc.Reason, Note: dc.Note})
	}
	aged := !v.HalfKeyTTLAt.IsZero() && !d.Now.Before(v.HalfKeyTTLAt)
	switch {
	case d.Status != order.StatusHeld && (d.Status != order.StatusPending || !aged):
		v.decision = decideNothing
	case d.AttemptAlive:
		v.decision = decideWait
	case aged:
		v.decision = decideNoResume
	default:
		v.decision = decideAny
	}
	v.Decide = v.decideText()
	return v
}

// decideText says what can be decided on the invoice now.
func (v detailOut) decideText() string {
	resolve := "billing invoice resolve " + v.OrderID + " --expect-key " + v.Key + " --by NAME"
	switch v.decision {
	case decideWait:
		return "an attempt under its key is in flight until " + stamp(v.Attempt.Until) + ": decide once it has ended"
	case decideAny:
		return "look the key up in the gateway's records, then: " + resolve + " (--charged CHARGE_ID | --declined | --rejected | --resume)"
	case decideNoResume:
		return "look the key up in the gateway's records, then: " + resolve + " (--charged CHARGE_ID | --declined | --rejected); " +
			"--resume is refused: half of BILLING_GATEWAY_KEY_TTL has passed since the key was first sent"
	}
	switch order.InvoiceStatus(v.Status) {
	case order.StatusPending:
		return "nothing: the service resumes it under its key (the pending completer), and holds it at half of BILLING_GATEWAY_KEY_TTL"
	case order.StatusRejected:
		return "nothing: no money moved; the order's next event, or a DLQ replay of its record, reopens it"
	}
	return "nothing: it is " + v.Status
}

// printDetail writes `billing invoice show` for a person.
func printDetail(w io.Writer, v detailOut) {
	d := v.raw
	fmt.Fprintf(w, "order %s: %s for %s (since %s)\n", v.OrderID, v.Status, age(d.Age), stamp(v.Since))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{k}, args...)...)
	}
	row("key", "%s (the Idempotency-Key to look up at the gateway)", v.Key)
	switch {
	case d.KeySentAt.IsZero():
		row("key first sent", "never")
	case v.HalfKeyTTLAt.IsZero():
		row("key first sent", "%s (%s ago)", stamp(d.KeySentAt), age(d.Now.Sub(d.KeySentAt)))
	default:
		row("key first sent", "%s (%s ago); half of BILLING_GATEWAY_KEY_TTL at %s", stamp(d.KeySentAt), age(d.Now.Sub(d.KeySentAt)),
			stamp(v.HalfKeyTTLAt))
	}
	row("amount", "%d %s, customer %s", v.Amount, v.Currency, v.CustomerID)
	if v.ChargeID != "" {
		row("charge id", "%s", v.ChargeID)
	}
	if v.Reason != "" {
		row("reason", "%s", v.Reason)
	}
	switch {
	case d.AttemptAlive:
		row("attempt", "in flight until %s (id %d): its request may be at the gateway", stamp(d.AttemptUntil), d.AttemptID)
	case !d.AttemptUntil.IsZero():
		row("attempt", "none in flight; the last (id %d) ended %s without an answer recorded", d.AttemptID, stamp(d.AttemptUntil))
	default:
		row("attempt", "none in flight")
	}
	resumes := fmt.Sprintf("%d by the pending completer under this key", v.ResumeAttempts)
	if !d.NextResumeAt.IsZero() && v.Status == string(order.StatusPending) {
		resumes += ", next not before " + stamp(d.NextResumeAt)
	}
	row("resumes", "%s", resumes)
	row("reopens", "%d", v.Reopens)
	row("created", "%s", stamp(d.CreatedAt))
	if v.OutboxWaiting > 0 {
		row("outbox", "%d invoice event(s) not yet published", v.OutboxWaiting)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "gateway answers (newest last; \""+order.AnswerNone+"\": the attempt ended with no answer, the request may have run):")
	if len(v.Answers) == 0 {
		fmt.Fprintln(w, "  none recorded")
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, a := range v.Answers {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", stamp(a.At), a.Key, a.Answer)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "decisions:")
	if len(v.Decisions) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, dc := range v.Decisions {
		line := fmt.Sprintf("  %s  %s by %s: %s -> %s, key %s", stamp(dc.At), dc.Command, dc.By, dc.Before, dc.After, dc.Key)
		if dc.ChargeID != "" {
			line += ", charge " + dc.ChargeID
		}
		if dc.Reason != "" {
			line += ", reason then: " + dc.Reason
		}
		if dc.Note != "" {
			line += ", note: " + dc.Note
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "decide: "+v.Decide)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stamp is t for a person: RFC 3339 in UTC, "-" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// age is d for a person, to the second.
func age(d time.Duration) string { return d.Round(time.Second).String() }

// cut is s cut to n runes, marked.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
