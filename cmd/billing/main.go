// Command billing consumes OrderConfirmed events and bills each order once.
// `billing -h` lists its commands (the table in commands), `billing
// <command> -h` says what one does and takes, and `billing run -h` lists
// the BILLING_* variables it reads.
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
	"text/tabwriter"
	"time"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/service"
	"github.com/acme/billing/internal/telemetry"
	"github.com/acme/billing/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		// A usage error printed the usage; a reported one (reconcile's
		// discrepancies) printed why.
		if !errors.Is(err, errUsage) && !errors.Is(err, errReported) {
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

// command is one of billing's commands. Help is static text and the
// table of Config's variables, so that it reads no configuration.
type command struct {
	name     string // as typed: "migrate", "dlq replay"
	synopsis string // its arguments, for usage lines
	summary  string // the line `billing -h` shows
	details  string // what `billing <name> -h` adds: flags, notes
	// needs is the configuration the command reads (docs/interface.md §1): run
	// loads and checks these parts, and Log with them, before the command
	// starts, and nothing else; 0 reads none.
	needs config.Part
	// logToStderr sends the command's JSON log to stderr, where its stdout
	// is its output (the invoice before and after); else it goes to stdout.
	logToStderr bool
	run         configured
}

// configured is a command: cfg holds the parts its entry needs (the others
// zero), log is the service's JSON logger at BILLING_LOG_LEVEL (info when
// it needs none).
type configured func(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error

// commands returns billing's commands, in the order `billing -h` lists
// them. A new command is a function of the configured signature (its own
// file) and an entry here naming the configuration it needs.
func commands() []command {
	return []command{
		{
			name:    "run",
			summary: `consume OrderConfirmed events and bill each order once, until SIGTERM/SIGINT; then drain, commit, exit (also plain "billing")`,
			details: "Migrates first when BILLING_MIGRATE_ON_START=true; otherwise refuses to start while migrations are missing.",
			needs:   config.AllParts,
			run:     runService,
		},
		{
			name:     "migrate",
			synopsis: "[--wait D] [--allow-no-rollback]",
			summary:  "apply the embedded database migrations; idempotent, safe from several pods at once",
			details: `--wait D  how long to wait for an unreachable Postgres, logging "waiting for postgres",
          before giving up with exit 1 (default ` + defaultMigrateWait.String() + `, 0: not at all); refused credentials,
          a missing database or a failing migration end it at once
--allow-no-rollback  migrate a database whose release cannot be rolled back to afterwards
          (billing version says which; without this flag such a database is refused, with one line
          naming the release and why)
Each statement takes its locks with a ` + postgres.MigrationLockTimeout.String() + ` lock_timeout; a statement that cannot is tried
again later, and the log names the sessions it waited for (migrations/README.md).`,
			needs: config.PartDatabase,
			run:   migrate,
		},
		{
			name:     "dlq replay",
			synopsis: "[--since RFC3339] [--limit N] [--dry-run]",
			summary:  "copy dead-lettered records back to the main topic, as their producers wrote them",
			details: `Reads the DLQ from its start; replaying twice is harmless.
--since RFC3339  replay only records whose x-failed-at is at or after this time (not in the future)
--limit N        stop after N records, 1 to 1000000 (default: no limit)
--dry-run        write nothing; print how many records would be replayed`,
			needs: config.PartKafka,
			run:   dlqReplay,
		},
		{
			name:     "invoice list",
			synopsis: invoiceListSynopsis,
			summary:  "list invoices by status and age, held and pending first: what waits for a person",
			details:  invoiceListHelp,
			// Its output is the list: the log goes to stderr.
			needs:       config.PartDatabase,
			logToStderr: true,
			run:         invoiceList,
		},
		{
			name:     "invoice show",
			synopsis: invoiceShowSynopsis,
			summary:  "one invoice: its key, attempts, reason, the gateway's answers, every decision on it, what can be decided",
			details:  invoiceShowHelp,
			// What can be decided depends on the key's lifetime: the rules.
			needs:       config.PartDatabase | config.PartRules,
			logToStderr: true,
			run:         invoiceShow,
		},
		{
			name:     "invoice resolve",
			synopsis: invoiceResolveSynopsis,
			summary:  "a person's decision on a held invoice (or a pending one past half its key's lifetime), kept with who decided",
			details:  invoiceResolveHelp,
			// The attempt's terms and publishing come with the database:
			// the decision takes the invoice as the pods would.
			needs:       config.PartDatabase | config.PartRules,
			logToStderr: true,
			run:         invoiceResolve,
		},
		{
			name:     "consume pause",
			synopsis: "--by NAME [--note TEXT]",
			summary:  "stop consumption in every pod within 10 s (drain, commit, leave the groups); pods stay ready; kept in Postgres",
			details:  consumePauseHelp,
			// The switch is a row in Postgres: it needs nothing else, so a
			// Job that runs it carries only the database secret.
			needs:       config.PartDatabase,
			logToStderr: true,
			run:         consumePause,
		},
		{
			name:        "consume resume",
			synopsis:    "--by NAME",
			summary:     "resume consumption in every pod after billing consume pause",
			details:     consumeResumeHelp,
			needs:       config.PartDatabase,
			logToStderr: true,
			run:         consumeResume,
		},
		{
			name:     "reconcile",
			synopsis: reconcileSynopsis,
			summary:  "compare the invoices of a period with the payment provider's records, both ways; settle held invoices the records decide",
			details:  reconcileHelp,
			// The invoices, the provider's records, and for --resolve-held
			// the attempt's terms and publishing: a CronJob that runs it
			// carries the database's and the gateway's secrets, no other.
			needs:       config.PartDatabase | config.PartGateway | config.PartRules,
			logToStderr: true,
			run:         reconcile,
		},
		{
			name:     "demo",
			synopsis: "[--orders N] [--log FILE]",
			summary:  "run the service in-process against an embedded broker, Postgres and gateway stub (make demo)",
			details:  "Only in a binary built with -tags demo (make demo); the service image leaves it out.",
			run:      runDemo,
		},
		{
			name:    "version",
			summary: "print the release, version and VCS revision, the schema it needs, the releases it runs beside and rolls back to, and the database's (also billing_build_info)",
			details: "Reads no configuration but BILLING_DATABASE_URL, and only when it is set: then it also says which\n" +
				"schema and release the database holds, and whether rolling back to its previous release is safe.",
			run: printVersion,
		},
	}
}

// reads is the configuration c reads: its needs, and Log with them.
func (c command) reads() config.Part {
	if c.needs == 0 {
		return 0
	}
	return c.needs | config.PartLog
}

// start loads the configuration c needs and builds its logger, then runs
// it. A bad variable ends it with one line naming the variable, before it
// runs.
func (c command) start(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	logTo := stdout
	if c.logToStderr {
		logTo = stderr
	}
	cfg, err := config.LoadParts(c.needs)
	if err != nil {
		return err
	}
	level := cfg.LogLevel
	if level == "" {
		level = "info"
	}
	return c.run(ctx, cfg, newLogger(logTo, level), args, stdout, stderr)
}

// usageLine is the one-line usage of c.
func (c command) usageLine() string {
	return strings.TrimSpace("usage: billing " + c.name + " " + c.synopsis)
}

// printUsage writes `billing -h`: the commands with a line each.
func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: billing <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  %s\t%s\n", "help", "print this list; billing <command> -h says what a command takes")
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configuration: BILLING_* environment variables; billing run -h lists them.")
}

// printCommandHelp writes `billing <command> -h`.
func printCommandHelp(w io.Writer, c command) {
	fmt.Fprintln(w, c.usageLine())
	fmt.Fprintln(w, "  "+c.summary)
	if c.details != "" {
		fmt.Fprintln(w)
		for l := range strings.Lines(c.details) {
			fmt.Fprint(w, "  "+l)
		}
		fmt.Fprintln(w)
	}
	switch {
	case c.name == "run":
		fmt.Fprintln(w)
		printConfigHelp(w)
	case c.needs != 0:
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Configuration (%s; billing run -h says what each means):\n", c.reads())
		for _, n := range config.NamesOf(c.reads()) {
			fmt.Fprintln(w, "  "+n)
		}
	default:
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Configuration: none.")
	}
}

// printConfigHelp writes the configuration `billing run -h` lists: every
// BILLING_* variable, and how tracing is switched on.
func printConfigHelp(w io.Writer) {
	fmt.Fprintln(w, "Configuration (environment; a bad value stops the program with one line naming the variable).")
	fmt.Fprintln(w, "run reads all of it; every other command only its parts, which billing <command> -h lists:")
	fmt.Fprintln(w)
	if err := config.Usage(w, config.AllParts); err != nil {
		fmt.Fprintln(w, err)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Tracing (OpenTelemetry) is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) is set;")
	fmt.Fprintln(w, "OTEL_EXPORTER_OTLP_PROTOCOL is http/protobuf (default) or grpc, OTEL_SERVICE_NAME defaults to billing,")
	fmt.Fprintln(w, "and the SDK's other OTEL_* variables apply (README.md, Traces).")
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

// lookup returns the command named name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run dispatches a command. It is main without the process: tests call it.
// Help comes before anything reads the configuration: it must work on a
// machine where none is set.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := "run"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "-h", "--help", "-help":
		printUsage(stdout)
		return nil
	case "help":
		if len(args) == 0 {
			printUsage(stdout)
			return nil
		}
		// billing help <command>: that command's help.
		name, args = args[0], append(args[1:], "-h")
	}
	// A command of two words: "dlq replay".
	if len(args) > 0 {
		if _, ok := lookup(name + " " + args[0]); ok {
			name, args = name+" "+args[0], args[1:]
		}
	}
	c, ok := lookup(name)
	if !ok {
		// The first word of commands of two words ("dlq"): their usage.
		var group []command
		for _, c := range commands() {
			if strings.HasPrefix(c.name, name+" ") {
				group = append(group, c)
			}
		}
		w := stderr
		if len(group) > 0 && wantsHelp(args) {
			w = stdout
		}
		if len(group) == 0 {
			fmt.Fprintf(w, "billing: unknown command %q\n\n", name)
			printUsage(w)
		}
		for _, c := range group {
			fmt.Fprintln(w, c.usageLine())
			fmt.Fprintln(w, "  "+c.summary+"; billing "+c.name+" -h says more")
		}
		if w == stdout {
			return nil
		}
		return errUsage
	}
	if wantsHelp(args) {
		printCommandHelp(stdout, c)
		return nil
	}
	return c.start(ctx, args, stdout, stderr)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}

// runService implements `billing run`.
func runService(ctx context.Context, cfg config.Config, log *slog.Logger, _ []string, _, _ io.Writer) error {
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
func migrate(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, _, stderr io.Writer) error {
	fs := flagSet("migrate", stderr)
	wait := fs.Duration("wait", defaultMigrateWait, "how long to wait for an unreachable Postgres before giving up (0: not at all)")
	allowNoRollback := fs.Bool("allow-no-rollback", false, "migrate a database whose release cannot be rolled back to afterwards")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "billing migrate: unexpected %q\n", fs.Arg(0))
		return errUsage
	}
	if *wait < 0 {
		return errors.New("--wait: must not be negative")
	}
	backoff := app.StartupBackoff()
	var since time.Time // of the first failed attempt
	for attempt := 1; ; attempt++ {
		err := migrateOnce(ctx, cfg, log, *allowNoRollback)
		if err == nil {
			log.Info("schema is current")
			return nil
		}
		if refused, ok := errors.AsType[*postgres.RefusedError](err); ok {
			return fmt.Errorf("billing migrate: %s; run billing migrate --allow-no-rollback to migrate anyway", refused.Reason)
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
		if !service.Sleep(ctx, min(backoff.Delay(attempt-1), left)) {
			return ctx.Err()
		}
	}
}

// migrateOnce applies the migrations on a pool of its own, refusing a
// database that could not be rolled back afterwards unless allowNoRollback.
func migrateOnce(ctx context.Context, cfg config.Config, log *slog.Logger, allowNoRollback bool) error {
	opts := []postgres.MigrateOption{postgres.WithMigrateLog(log)}
	if !allowNoRollback {
		opts = append(opts, postgres.WithRefusal(rollbackRefusal))
	}
	return postgres.MigrateURL(ctx, cfg.DatabaseURL.Reveal(), opts...)
}

// rollbackRefusal is why migrating a database that applied applied would
// leave it with no safe rollback: the release whose schema it held before
// this release's migrations (version.RollbackRefusal).
func rollbackRefusal(applied []postgres.AppliedMigration) string {
	return version.RollbackRefusal(postgres.SchemaBefore(applied, version.Release))
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
