package needs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Skipf and Fatalf record the first call
// instead of ending the test, so that each rule can be checked in-process.
type recorder struct {
	testing.TB
	first string // "skip: …" or "fatal: …"
}

func (r *recorder) Skipf(format string, args ...any) {
	if r.first == "" {
		r.first = "skip: " + fmt.Sprintf(format, args...)
	}
}

func (r *recorder) Fatalf(format string, args ...any) {
	if r.first == "" {
		r.first = "fatal: " + fmt.Sprintf(format, args...)
	}
}

func TestMissing(t *testing.T) {
	err := errors.New("pgbouncer not installed")
	for env, want := range map[string]string{"": "skip: ", "0": "skip: ", "1": "fatal: "} {
		t.Run("BILLING_E2E="+env, func(t *testing.T) {
			t.Setenv(EnvE2E, env)
			r := &recorder{TB: t}
			Missing(r, err)
			if !strings.HasPrefix(r.first, want) || !strings.Contains(r.first, err.Error()) || !strings.Contains(r.first, "scripts/deps.sh") {
				t.Errorf("Missing with BILLING_E2E=%q: %q, want %q naming the error and scripts/deps.sh", env, r.first, want+"…")
			}
		})
	}
}

// External skips under -short whatever BILLING_E2E says, and does nothing
// otherwise: make test-unit runs this package with -short, make test
// without.
func TestExternal(t *testing.T) {
	t.Setenv(EnvE2E, "1")
	r := &recorder{TB: t}
	External(r, "a Postgres server")
	if testing.Short() {
		if !strings.HasPrefix(r.first, "skip: ") || !strings.Contains(r.first, "a Postgres server") {
			t.Errorf("with -short: %q, want a skip naming what is needed", r.first)
		}
	} else if r.first != "" {
		t.Errorf("without -short: %q, want nothing", r.first)
	}
}
