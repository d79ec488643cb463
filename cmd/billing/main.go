// Command billing consumes OrderConfirmed events and bills each order once.
//
//	billing [run]          consume until SIGTERM/SIGINT, drain, commit, exit
//	billing migrate        apply the embedded migrations
//	billing dlq replay     copy DLQ records back to the main topic
//	billing invoice resolve ORDER_ID (--charged ID | --declined | --rejected | --resume)
//	                       a person's decision on a held invoice
//	billing demo           run everything in-process against sample events
//	billing version        print the version and VCS revision
//	billing help           print usage (also -h, and <command> -h)
//
// Configuration is read from BILLING_* environment variables (README.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/telemetry"
	"github.com/acme/billing/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errUsage) {
			reportFatal(os.Stderr, err)
		}
		os.Exit(1)
	}
}

// reportFatal writes the error that ends the process as one JSON log line,
// like every other line the service writes, so that log pipelines parse it.
func reportFatal(w io.Writer, err error) {
	slog.New(slog.NewJSONHandler(w, nil)).Error("billing: fatal", slog.String("error", err.Error()))
}

var errUsage = errors.New("usage")

const usage = `usage: billing [run | migrate | dlq replay [--since RFC3339] [--limit N] [--dry-run] | invoice resolve ORDER_ID (--charged CHARGE_ID | --declined | --rejected | --resume) | demo | version | help]`

// commandHelp is what `billing <command> -h` prints. It is static text so
// that help needs no configuration.
var commandHelp = map[string]string{
	"run": `usage: billing run
  consume until SIGTERM/SIGINT, drain in-flight work, commit, exit (also plain "billing").
  Configuration: BILLING_* environment variables (README.md).`,
	"migrate": `usage: billing migrate
  apply the embedded migrations; idempotent, safe from several pods at once.`,
	"dlq replay": `usage: billing dlq replay [--since RFC3339] [--limit N] [--dry-run]
  copy DLQ records back to the main topic, read from the DLQ's start.
  --since RFC3339  replay only records whose x-failed-at is at or after this time
  --limit N        stop after N records (0: no limit)
  --dry-run        write nothing; print how many records would be replayed`,
	"dlq": `usage: billing dlq replay [--since RFC3339] [--limit N] [--dry-run]
  see billing dlq replay -h`,
	"invoice resolve": invoiceResolveHelp,
	"invoice": `usage: billing invoice resolve ORDER_ID (--charged CHARGE_ID | --declined | --rejected | --resume)
  see billing invoice resolve -h`,
	"demo": `usage: billing demo [flags]
  run the service in-process against an embedded broker, Postgres and gateway stub.`,
	"version": `usage: billing version
  print the version and VCS revision.`,
}

// wantsHelp reports whether args ask for help (-h, -help, --help).
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

// run dispatches a command. It is main without the process: tests call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	if cmd == "dlq" && len(args) > 0 && args[0] == "replay" {
		cmd, args = "dlq replay", args[1:]
	}
	if cmd == "invoice" && len(args) > 0 && args[0] == "resolve" {
		cmd, args = "invoice resolve", args[1:]
	}
	// Help before anything reads the configuration: it must work on a
	// machine where none is set.
	if text, ok := commandHelp[cmd]; ok && wantsHelp(args) {
		fmt.Fprintln(stdout, text)
		return nil
	}
	switch cmd {
	case "run":
		cfg, log, err := load(stdout)
		if err != nil {
			return err
		}
		return runService(ctx, cfg, log)
	case "migrate":
		cfg, log, err := load(stdout)
		if err != nil {
			return err
		}
		return migrate(ctx, cfg, log, args, stderr)
	case "dlq replay":
		cfg, log, err := load(stdout)
		if err != nil {
			return err
		}
		return dlqReplay(ctx, cfg, log, args, stdout, stderr)
	case "invoice resolve":
		cfg, log, err := load(stderr)
		if err != nil {
			return err
		}
		return invoiceResolve(ctx, cfg, log, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version.Get())
		return nil
	case "-h", "--help", "-help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return errUsage
}

// load reads the configuration and builds the JSON logger. A bad variable
// is one line naming it.
func load(stdout io.Writer) (config.Config, *slog.Logger, error) {
	cfg, err := config.Load()
	if err != nil {
		return config.Config{}, nil, err
	}
	return cfg, newLogger(stdout, cfg.LogLevel), nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}

func runService(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	log.Info("configuration", slog.Any("config", cfg))
	tracing, err := telemetry.Setup(ctx, log)
	if err != nil {
		return err
	}
	if exp := tracing.Exporter(); exp != "" {
		log.Info("tracing on", slog.String("exporter", exp))
	}
	// Run returns once the consumers have drained and everything is closed:
	// the last records' spans have ended, and are flushed here.
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn("flush traces", slog.String("error", err.Error()))
		}
	}()
	a, err := app.New(ctx, cfg, app.Tuning{Tracer: tracing.TracerProvider()}, log)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// tracingFlushTimeout bounds the export of the last spans at exit; it comes
// on top of BILLING_SHUTDOWN_TIMEOUT, within the pod's grace period.
const tracingFlushTimeout = 5 * time.Second

// defaultMigrateWait is how long `billing migrate` waits for an unreachable
// Postgres. Long enough to ride out a restart or a managed failover (a
// minute or two) in the init container, where the pod then starts the
// moment Postgres answers instead of after a crash-loop back-off (up to 5
// minutes); short enough that a person or a CI job with a wrong host hears
// of it within minutes. After it the init container exits 1 and the
// kubelet starts it again, so a longer outage shows as restarts.
const defaultMigrateWait = 5 * time.Minute

// migrate implements `billing migrate [--wait D]`: it applies the
// migrations, waiting up to D while Postgres is unreachable (the time
// counts from the first failed attempt). What waiting cannot fix (refused
// credentials, a missing database, an untrusted certificate, a failing
// migration) ends it at once.
func migrate(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stderr io.Writer) error {
	fs := flagSet("migrate", stderr)
	wait := fs.Duration("wait", defaultMigrateWait, "how long to wait for an unreachable Postgres before giving up (0: not at all)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, commandHelp["migrate"])
		return errUsage
	}
	if *wait < 0 {
		return errors.New("--wait: must not be negative")
	}
	backoff := order.NewRetryPolicy().Startup
	var since time.Time // of the first failed attempt
	for attempt := 1; ; attempt++ {
		err := migrateOnce(ctx, cfg)
		if err == nil {
			log.Info("schema is current")
			return nil
		}
		if why := postgres.Misconfigured(err); why != "" {
			return fmt.Errorf("postgres: %s: check BILLING_DATABASE_URL", why)
		}
		if ctx.Err() != nil || !postgres.Unreachable(err) {
			return err
		}
		if since.IsZero() {
			since = time.Now()
		}
		left := *wait - time.Since(since)
		if left <= 0 {
			return fmt.Errorf("postgres unreachable, gave up after billing migrate --wait %s: %s", *wait, oneLine(err.Error()))
		}
		log.Warn("waiting for postgres", slog.Int("attempt", attempt), slog.Duration("left", left.Round(time.Second)), slog.String("error", oneLine(err.Error())))
		t := time.NewTimer(min(backoff.Delay(attempt-1), left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// migrateOnce opens a pool of two connections (a no-transaction migration
// takes both), applies the migrations and closes it.
func migrateOnce(ctx context.Context, cfg config.Config) error {
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return postgres.Migrate(ctx, pool)
}

// oneLine joins the lines of a driver's message (pgx lists one line per
// address it tried).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// flagSet returns a FlagSet that reports to stderr and does not exit.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
