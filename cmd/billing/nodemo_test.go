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
// image builds it), the binary links neither the in-process broker, the
// gateway stub nor the throwaway-Postgres starter.
func TestServiceBinaryCarriesNoTestTooling(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, tooling := range []string{"kfake", "gatewaystub", "pgcluster", "internal/demo", "kafkatest", "pgtest"} {
			if strings.HasSuffix(dep, "/"+tooling) {
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
