package telemetry_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/acme/billing/internal/pgtest"
)

// TestMain runs the tests with a throwaway Postgres, then checks that no
// goroutine outlived them: a tracing set up from an empty environment must
// start none.
func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
