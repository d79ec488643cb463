package postgres

import (
	"testing"
	"time"
)

// A transaction rolled back for a conflict runs three times in all, the
// pauses doubling from 20ms; then the event fails as a TransientError.
func TestConflictDelay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		run   int
		want  time.Duration
		again bool
	}{{1, 20 * time.Millisecond, true}, {2, 40 * time.Millisecond, true}, {3, 0, false}} {
		if d, again := conflictDelay(tt.run); d != tt.want || again != tt.again {
			t.Errorf("conflictDelay(%d) = %v, %v; want %v, %v", tt.run, d, again, tt.want, tt.again)
		}
	}
}
