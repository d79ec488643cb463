//go:build !demo

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/acme/billing/internal/config"
)

// runDemo stands in for `billing demo` in the service binary, which is built
// without the demo and its test tooling (demo.go, -tags demo).
func runDemo(_ context.Context, _ config.Config, _ *slog.Logger, _ []string, _, stderr io.Writer) error {
	fmt.Fprintln(stderr, "this binary was built without the demo; run `make demo`")
	return errUsage // exit 1, nothing more printed
}
