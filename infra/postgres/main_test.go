package postgres_test

import (
	"testing"

	"github.com/acme/billing/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
