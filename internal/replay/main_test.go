package replay_test

import (
	"testing"

	"github.com/acme/billing/internal/testkit/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }
