package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	reconciliation "github.com/acme/billing/internal/reconcile"
)

// reconcileSynopsis is the arguments of `billing reconcile`.
const reconcileSynopsis = "[--since D | --day YYYY-MM-DD | --from RFC3339 --to RFC3339] [--resolve-held] [--by NAME] [--json]"

// reconcileHelp is what `billing reconcile -h` says below the usage line
// and summary (main.go's commands).
const reconcileHelp = `Compares the invoices created in the period with the payment provider's records of the same
period, both ways, and prints one line per discrepancy, then "reconciled N orders: M discrepancies":
  double_charge                   two successful charges or more for one order, under any keys
  money_without_charged_invoice   money taken for an order whose invoice is not charged with it,
                                  or which billing never invoiced
  charged_invoice_without_money   a charged invoice whose charge the provider does not show
  amount_mismatch                 a charge of another amount or currency than its invoice
Held invoices are listed with what the provider's records under their key show.
--since D           the last D, up to now (1m to 744h)
--day YYYY-MM-DD    that UTC day, once ended
--from/--to RFC3339 that period (at most 744h)
                    (none of the three: the previous UTC day, what the daily CronJob runs)
--resolve-held      settle each held invoice whose outcome the records show beyond doubt (one
                    successful charge under its key: charged with it; a decline and nothing
                    else under it: declined), as a decision by --by NAME; leave the rest held
--by NAME           who runs it (1-64 printable characters): kept with the run, and with each
                    decision; required with --resolve-held
--json              one JSON object instead of the lines
The run's result is kept in Postgres; the service exports it (billing_reconcile_discrepancies,
billing_reconcile_last_run_timestamp_seconds). Exits 1 when a discrepancy remains.`

// errReported ends a command with exit status 1 after its output said
// why: no fatal log line follows.
var errReported = errors.New("reported")

// reconcileArgs is what `billing reconcile` was asked.
type reconcileArgs struct {
	period      order.Period
	resolveHeld bool
	by          string
	asJSON      bool
}

// parseReconcile reads the period's flags, --resolve-held, --by and
// --json, each by its rule (args.go).
func parseReconcile(args []string, now time.Time, stderr io.Writer) (reconcileArgs, error) {
	var (
		r reconcileArgs
		p periodFlags
	)
	fs := flagSet("reconcile", stderr)
	fs.StringVar(&p.since, "since", "", "the last D, up to now")
	fs.StringVar(&p.day, "day", "", "that UTC day")
	fs.StringVar(&p.from, "from", "", "the period's start (RFC 3339)")
	fs.StringVar(&p.to, "to", "", "the period's end (RFC 3339)")
	fs.BoolVar(&r.resolveHeld, "resolve-held", false, "settle the held invoices the records decide")
	by := fs.String("by", "", "who runs it")
	fs.BoolVar(&r.asJSON, "json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return r, errUsage
	}
	if fs.NArg() > 0 {
		return r, fmt.Errorf("reconcile: unexpected argument %q", fs.Arg(0)[:min(len(fs.Arg(0)), 64)])
	}
	var err error
	if r.period, err = periodArg(p, now); err != nil {
		return r, fmt.Errorf("reconcile: %w", err)
	}
	if *by != "" || r.resolveHeld {
		if r.by, err = nameArg("--by", *by); err != nil {
			return r, fmt.Errorf("reconcile: %w (with --resolve-held: who decides)", err)
		}
	}
	return r, nil
}

// reconcile implements `billing reconcile`.
func reconcile(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	started := time.Now()
	a, err := parseReconcile(args, started, stderr)
	if err != nil {
		return err
	}
	host, _ := os.Hostname() // where it ran (the CronJob's pod); unknown is no reason to fail
	rep, err := reconciliation.RunConfigured(ctx, cfg, log, reconciliation.Options{Period: a.period, ResolveHeld: a.resolveHeld, By: a.by, Host: host}, started)
	if err != nil {
		return err
	}
	if a.asJSON {
		err = rep.PrintJSON(stdout)
	} else {
		err = rep.Print(stdout)
	}
	if err != nil {
		return err
	}
	// The service's JSON log line, for the cluster's log pipeline (the
	// CronJob's pod log).
	res := rep.Result
	attrs := []any{slog.String("period", a.period.String()), slog.Int("orders", res.Orders), slog.Int("discrepancies", res.Total()),
		slog.Int("held_settled", res.HeldSettled), slog.Int("held_left", res.HeldLeft), slog.Int("lookups", rep.Lookups),
		slog.Int("pages", rep.Pages), slog.Duration("took", time.Since(started).Round(time.Millisecond)), slog.String("by", a.by)}
	for _, k := range order.DiscrepancyKinds() {
		attrs = append(attrs, slog.Int(string(k), res.Discrepancies[k]))
	}
	log.Info("reconcile run recorded", attrs...)
	if res.Total() > 0 {
		return errReported
	}
	return nil
}
