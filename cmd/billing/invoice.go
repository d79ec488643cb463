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

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
)

// invoiceResolveHelp is what `billing invoice resolve -h` says below the
// usage line and summary (main.go's commands).
const invoiceResolveHelp = `A held invoice: a 422, or a key past half of BILLING_GATEWAY_KEY_TTL. Look the order's
Idempotency-Key up in the gateway's own records first, then record what they show.
--charged CHARGE_ID  the gateway charged it: the charge id found there
--declined           the gateway declined it
--rejected           no money moved: the order's next event (or a DLQ replay) reopens it
--resume             back to pending for one more automatic attempt under its key;
                     refused once half of BILLING_GATEWAY_KEY_TTL has passed since the key was first sent
Prints the invoice before and after. Only a held invoice is changed.`

// resolveArgs is what `billing invoice resolve` was asked to do.
type resolveArgs struct {
	orderID  string
	decision order.Resolution
}

// parseResolve reads ORDER_ID and exactly one decision flag, ORDER_ID
// before or after the flag.
func parseResolve(args []string, stderr io.Writer) (resolveArgs, error) {
	var r resolveArgs
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		r.orderID, args = args[0], args[1:]
	}
	fs := flagSet("invoice resolve", stderr)
	charged := fs.String("charged", "", "the gateway charged it: the charge id found in its records")
	declined := fs.Bool("declined", false, "the gateway declined it")
	rejected := fs.Bool("rejected", false, "no money moved: the order may be reopened")
	resume := fs.Bool("resume", false, "one more automatic attempt under its key")
	if err := fs.Parse(args); err != nil {
		return r, errUsage
	}
	switch {
	case r.orderID == "" && fs.NArg() == 1:
		r.orderID = fs.Arg(0)
	case fs.NArg() > 0:
		return r, fmt.Errorf("invoice resolve: unexpected argument %q", fs.Arg(0))
	}
	if strings.TrimSpace(r.orderID) == "" {
		return r, errors.New("invoice resolve: ORDER_ID is required")
	}
	seen := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { seen[f.Name] = true })
	var picked []order.Resolution
	for _, d := range []struct {
		on bool
		r  order.Resolution
	}{
		{seen["charged"], order.Resolution{Status: order.StatusCharged, ChargeID: strings.TrimSpace(*charged)}},
		{*declined, order.Resolution{Status: order.StatusDeclined}},
		{*rejected, order.Resolution{Status: order.StatusRejected}},
		{*resume, order.Resolution{Status: order.StatusPending}},
	} {
		if d.on {
			picked = append(picked, d.r)
		}
	}
	n := len(picked)
	if n == 1 {
		r.decision = picked[0]
	}
	switch {
	case n != 1:
		return r, errors.New("invoice resolve: give exactly one of --charged CHARGE_ID, --declined, --rejected, --resume")
	case r.decision.Status == order.StatusCharged && r.decision.ChargeID == "":
		return r, errors.New("invoice resolve: --charged needs the charge id found in the gateway's records")
	}
	return r, nil
}

// invoiceResolve implements `billing invoice resolve`.
func invoiceResolve(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	r, err := parseResolve(args, stderr)
	if err != nil {
		return err
	}
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	terms := order.NewAttemptTerms(cfg.PaymentTimeout, cfg.GatewayKeyTTL)
	// The decision is a transition: its invoice event goes to the outbox
	// as a settle's does, for the running pods' relay to publish.
	store := postgres.NewStore(pool, postgres.WithEvents(cfg.PublishEvents))
	before, after, err := store.Resolve(ctx, r.orderID, r.decision, terms.HoldAfter)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "before: "+describe(before))
	fmt.Fprintln(stdout, "after:  "+describe(after))
	log.Info("held invoice resolved", slog.String("order_id", r.orderID), slog.String("key", after.EventID.String()),
		slog.String("status", string(after.Status)), slog.String("charge_id", after.ChargeID))
	return nil
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
