package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
)

// invoiceResolveSynopsis is the arguments of `billing invoice resolve`.
const invoiceResolveSynopsis = "ORDER_ID (--charged CHARGE_ID | --declined | --rejected | --resume) --by NAME --expect-key KEY [--note TEXT]"

// invoiceResolveHelp is what `billing invoice resolve -h` says below the
// usage line and summary (main.go's commands).
const invoiceResolveHelp = `A held invoice (a 422, or a key past half of BILLING_GATEWAY_KEY_TTL), or a pending one whose
key was first sent more than half of BILLING_GATEWAY_KEY_TTL ago (the service should have held
it: its pending completer is not running). Read its key with billing invoice show ORDER_ID,
look that Idempotency-Key up in the gateway's own records, then record what they show:
--charged CHARGE_ID  the gateway charged it: the charge id found there
--declined           the gateway declined it
--rejected           no money moved: the order's next event (or a DLQ replay) reopens it
--resume             back to pending for one more automatic attempt under its key;
                     refused once half of BILLING_GATEWAY_KEY_TTL has passed since the key was first sent
--by NAME            who decides (1-64 printable characters), kept with the decision
--expect-key KEY     the key whose records you read: refused if the invoice is under another
                     (another attempt; billing invoice show prints its key)
--note TEXT          why, kept with the decision (at most 512 printable characters)
Takes the invoice's attempt first, like every path that sends its key: refused while an
attempt is in flight. Prints the invoice before and after; the decision is kept for good
(billing invoice show lists it), logged, and published as the invoice event of its status.
ORDER_ID follows the event's rule (not blank, at most 128 bytes, no control character) and
CHARGE_ID is 1 to 255 bytes of printable ASCII; anything else is refused unquoted.`

// resolveArgs is what `billing invoice resolve` was asked to do.
type resolveArgs struct {
	orderID  string
	decision order.Resolution
}

// parseResolve reads ORDER_ID, exactly one decision flag, --by,
// --expect-key and --note, ORDER_ID before or after the flags, each
// checked by its rule (args.go).
func parseResolve(args []string, stderr io.Writer) (resolveArgs, error) {
	var r resolveArgs
	fs := flagSet("invoice resolve", stderr)
	charged := fs.String("charged", "", "the gateway charged it: the charge id found in its records")
	declined := fs.Bool("declined", false, "the gateway declined it")
	rejected := fs.Bool("rejected", false, "no money moved: the order may be reopened")
	resume := fs.Bool("resume", false, "one more automatic attempt under its key")
	by := fs.String("by", "", "who decides")
	expect := fs.String("expect-key", "", "the key whose gateway records you read")
	note := fs.String("note", "", "why")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return r, errUsage
	}
	if len(pos) > 1 {
		return r, fmt.Errorf("invoice resolve: unexpected argument %q", pos[1][:min(len(pos[1]), 64)])
	}
	if len(pos) == 1 {
		r.orderID = pos[0]
	}
	if r.orderID == "" {
		return r, errors.New("invoice resolve: ORDER_ID is required")
	}
	id, err := orderIDArg(r.orderID)
	if err != nil {
		return r, fmt.Errorf("invoice resolve: %w", err)
	}
	r.orderID = id
	seen := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { seen[f.Name] = true })
	var picked []order.Resolution
	for _, d := range []struct {
		on bool
		r  order.Resolution
	}{
		{seen["charged"], order.Resolution{Status: order.StatusCharged, ChargeID: *charged}},
		{*declined, order.Resolution{Status: order.StatusDeclined}},
		{*rejected, order.Resolution{Status: order.StatusRejected}},
		{*resume, order.Resolution{Status: order.StatusPending}},
	} {
		if d.on {
			picked = append(picked, d.r)
		}
	}
	if len(picked) != 1 {
		return r, errors.New("invoice resolve: give exactly one of --charged CHARGE_ID, --declined, --rejected, --resume")
	}
	r.decision = picked[0]
	if r.decision.Status == order.StatusCharged {
		// The charge id is stored and published in InvoiceCharged.
		if r.decision.ChargeID, err = chargeIDArg(r.decision.ChargeID); err != nil {
			return r, fmt.Errorf("invoice resolve: --charged %w", err)
		}
	}
	byName, err := nameArg("--by", *by)
	if err != nil {
		return r, fmt.Errorf("invoice resolve: %w", err)
	}
	noteText, err := noteArg("--note", *note)
	if err != nil {
		return r, fmt.Errorf("invoice resolve: %w", err)
	}
	if *expect == "" {
		return r, errors.New("invoice resolve: --expect-key KEY is required: the key whose gateway records you read (billing invoice show prints it)")
	}
	key, err := uuid.FromString(*expect)
	if err != nil {
		return r, errors.New("invoice resolve: --expect-key KEY is not a key (a UUID, as billing invoice show prints it)")
	}
	r.decision.Key, r.decision.By, r.decision.Note = key, byName, noteText
	return r, nil
}

// parseInterspersed parses args with fs, flags before, between and after
// the positional arguments, which it returns; after "--" every argument is
// positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// invoiceResolve implements `billing invoice resolve`.
func invoiceResolve(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	r, err := parseResolve(args, stderr)
	if err != nil {
		return err
	}
	// One connection: the decision is one transaction, and an operator
	// command must fit the connection budget at full scale
	// (deploy/README.md, "Connection arithmetic").
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	holdAfter := order.NewAttemptTerms(cfg.PaymentTimeout, cfg.GatewayKeyTTL).HoldAfter
	// The decision is a transition: its invoice event goes to the outbox
	// as a settle's does, for the running pods' relay to publish.
	store := postgres.NewStore(pool, postgres.WithEvents(cfg.PublishEvents))
	before, after, err := store.Resolve(ctx, r.orderID, r.decision, holdAfter)
	if err != nil {
		return resolveRefused(r, err)
	}
	fmt.Fprintln(stdout, "before: "+describe(before))
	fmt.Fprintln(stdout, "after:  "+describe(after))
	fmt.Fprintf(stdout, "decision recorded: %s by %s (billing invoice show %s lists it)\n", order.CommandInvoiceResolve, r.decision.By, r.orderID)
	// The service's JSON log line, for the cluster's log pipeline (the
	// operator Job's pod log; deploy/README.md, "Operator commands").
	log.Info("invoice decision recorded", slog.String("command", order.CommandInvoiceResolve), slog.String("order_id", r.orderID),
		slog.String("key", after.EventID.String()), slog.String("by", r.decision.By),
		slog.String("status_before", string(before.Status)), slog.String("status_after", string(after.Status)),
		slog.String("reason_before", before.Reason), slog.String("charge_id", after.ChargeID), slog.String("note", r.decision.Note))
	return nil
}

// resolveRefused says why a decision was refused, and what to do next.
func resolveRefused(r resolveArgs, err error) error {
	var busy *order.AttemptBusyError
	switch {
	case errors.Is(err, order.ErrOtherKey):
		return fmt.Errorf("%w; read the gateway's records of the key billing invoice show %s prints, then decide on that key", err, r.orderID)
	case errors.As(err, &busy):
		return fmt.Errorf("%w: its key may be at the gateway; try again once it has ended", err)
	case errors.Is(err, order.ErrNoInvoice), errors.Is(err, order.ErrNotHeld), errors.Is(err, order.ErrKeyTooOld):
		return fmt.Errorf("%w (billing invoice show %s)", err, r.orderID)
	}
	return err
}

// describe is one line of an invoice for a person.
func describe(inv order.Invoice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "order %s %s, key %s, %d %s, customer %s", inv.OrderID, inv.Status, inv.EventID, inv.Amount, inv.Currency, inv.CustomerID)
	if inv.ChargeID != "" {
		fmt.Fprintf(&b, ", charge %s", inv.ChargeID)
	}
	if !inv.KeySentAt.IsZero() {
		fmt.Fprintf(&b, ", key first sent %s", inv.KeySentAt.UTC().Format(time.RFC3339))
	}
	if inv.Reason != "" {
		fmt.Fprintf(&b, ", reason: %s", inv.Reason)
	}
	return b.String()
}
