package app

import (
	"testing"
	"time"
)

// Each tier waits for x-not-before at most its own delay; a tier beyond the
// configured list (left by a shortened BILLING_RETRY_DELAYS) takes the last.
func TestTierDelay(t *testing.T) {
	t.Parallel()
	delays := []time.Duration{5 * time.Second, time.Minute, 10 * time.Minute}
	for _, tt := range []struct {
		tier int
		want time.Duration
	}{{0, 0}, {1, 5 * time.Second}, {2, time.Minute}, {3, 10 * time.Minute}, {4, 10 * time.Minute}} {
		if got := tierDelay(delays, tt.tier); got != tt.want {
			t.Errorf("tierDelay(tier %d) = %v, want %v", tt.tier, got, tt.want)
		}
	}
	if got := tierDelay(nil, 1); got != 0 {
		t.Errorf("tierDelay without delays = %v, want 0", got)
	}
}
