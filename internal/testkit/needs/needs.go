// Package needs decides, in one place, what a test does when it needs a
// program from outside the Go toolchain: a Postgres server, a real Kafka
// broker, PgBouncer, stripe-mock, promtool. The helpers that start those
// (pgtest, kafkatest, pgbouncertest, stripemock) call it, so that each test
// that uses them follows the same three rules:
//
//   - with -short (`make test-unit`, the fast lane) it is skipped before
//     anything starts;
//   - without the program it is skipped, naming what scripts/deps.sh
//     installs;
//   - with BILLING_E2E=1 (`make test`, CI) a missing program fails it
//     instead, so that CI never passes by skipping.
//
// Production code does not import it.
package needs

import (
	"os"
	"testing"
)

// EnvE2E is the variable that turns a missing program into a failure.
const EnvE2E = "BILLING_E2E"

// E2E reports whether BILLING_E2E=1.
func E2E() bool { return os.Getenv(EnvE2E) == "1" }

// External skips t under -short: it needs what (e.g. "a Postgres server"),
// which the fast lane leaves out whether or not it is installed.
func External(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped with -short", what)
	}
}

// Missing ends t for err, which says that the machine lacks a program t
// needs (each helper has its own ErrUnavailable for that): t is skipped, or
// failed when BILLING_E2E=1.
func Missing(t testing.TB, err error) {
	t.Helper()
	if E2E() {
		t.Fatalf("%v (scripts/deps.sh installs it)", err)
	}
	t.Skipf("%v (scripts/deps.sh installs it; BILLING_E2E=1 makes this a failure)", err)
}
