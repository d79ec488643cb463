package replay_test

import (
	"testing"

	"github.com/acme/billing/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }
