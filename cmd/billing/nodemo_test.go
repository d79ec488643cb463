//go:build !demo

package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// TestServiceBinaryCarriesNoTestTooling: built without the demo tag (as the
// image builds it), the binary links no test tooling: nothing under
// internal/testkit (the in-process and real broker starters, the gateway
// stub, the throwaway Postgres and PgBouncer), neither core's test
// packages, the demo nor the in-process broker kfake.
func TestServiceBinaryCarriesNoTestTooling(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const module = "github.com/acme/billing/"
	tooling := []string{
		module + "internal/testkit",
		module + "internal/demo",
		module + "core/order/ordertest",
		module + "core/order/ledgertest",
		"github.com/twmb/franz-go/pkg/kfake",
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps printed no package")
	}
	for _, dep := range deps {
		for _, tool := range tooling {
			if dep == tool || strings.HasPrefix(dep, tool+"/") {
				t.Errorf("the service binary links %s", dep)
			}
		}
	}
}

// TestDemoNotBuiltIn: `billing demo` in the service binary says how to get
// the demo, in one line, and fails.
func TestDemoNotBuiltIn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a demo that started anyway stops at once
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"demo"}, &stdout, &stderr)
	if err == nil {
		t.Errorf("billing demo: got nil error, want non-zero exit")
	}
	if got, want := stderr.String(), "this binary was built without the demo; run `make demo`\n"; got != want {
		t.Errorf("stderr: got %q, want %q", got, want)
	}
}
