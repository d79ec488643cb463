package telemetry_test

import (
	"testing"

	"github.com/acme/billing/internal/testkit/pgtest"
)

// TestMain runs the tests with a throwaway Postgres, then checks that no
// goroutine outlived them (pgtest.Main runs goleak): a tracing set up from
// an empty environment must start none.
func TestMain(m *testing.M) { pgtest.Main(m) }
