//go:build demo

// The demo links an in-process Kafka broker, a throwaway-Postgres starter and
// a stub gateway: test tooling the service image must not carry. It is built
// only with -tags demo (`make demo`); nodemo.go stands in otherwise.

package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/demo"
)

// runDemo implements `billing demo`. It needs no configuration; when
// BILLING_DATABASE_URL is set it uses that Postgres instead of starting one.
func runDemo(ctx context.Context, _ config.Config, _ *slog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := flagSet("demo", stderr)
	orders := fs.Int("orders", 0, "distinct orders to send (default 120)")
	logFile := fs.String("log", "", "where the service's JSON log goes (default $TMPDIR/billing-demo.log)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	_, err := demo.Run(ctx, demo.Options{Orders: *orders, LogFile: *logFile, DatabaseURL: os.Getenv("BILLING_DATABASE_URL")}, stdout)
	return err
}
