// Command billing consumes OrderConfirmed events and bills each order once.
//
//	billing [run]          consume until SIGTERM/SIGINT, drain, commit, exit
//	billing migrate        apply the embedded migrations
//	billing dlq replay     copy DLQ records back to the main topic
//	billing demo           run everything in-process against sample events
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
	"syscall"
	"time"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/app"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "billing:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usage = `usage: billing [run | migrate | dlq replay [--since RFC3339] [--limit N] [--dry-run] | demo]`

// run dispatches a command. It is main without the process: tests call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
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
		return migrate(ctx, cfg, log)
	case "dlq":
		if len(args) == 0 || args[0] != "replay" {
			fmt.Fprintln(stderr, usage)
			return errUsage
		}
		cfg, log, err := load(stdout)
		if err != nil {
			return err
		}
		return dlqReplay(ctx, cfg, log, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "-h", "--help", "help":
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

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	log.Info("schema is current")
	return nil
}

// flagSet returns a FlagSet that reports to stderr and does not exit.
func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
