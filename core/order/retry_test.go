package order

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestRetryPolicyDecide is the documentation of what happens to a failed
// event, and when, under the default schedules and the default tiers
// (BILLING_RETRY_DELAYS=5s,1m,10m).
func TestRetryPolicyDecide(t *testing.T) {
	t.Parallel()
	p := NewRetryPolicy(5*time.Second, time.Minute, 10*time.Minute)
	boom := errors.New("boom")
	transient := func(hint time.Duration) error {
		return fmt.Errorf("charge: %w", &TransientError{Op: "charge", Err: boom, RetryAfter: hint})
	}
	outage := func(hint time.Duration) error {
		return &OutageError{Dependency: DependencyGateway, Err: boom, RetryAfter: hint}
	}
	const s, m = time.Second, time.Minute
	tests := []struct {
		name          string
		err           error
		tier, attempt int
		want          Decision
	}{
		// What is wrong with the record itself goes to the DLQ at once, from any tier.
		{"invalid event", &ValidationError{Field: "event_id", Reason: "nil UUID"}, 0, 0, Decision{Action: ActionDeadLetter, Class: ClassPermanent}},
		{"gateway refusal on tier 2", &PermanentError{Op: "charge", Err: boom}, 2, 0, Decision{Action: ActionDeadLetter, Class: ClassPermanent}},
		{"untyped error", boom, 0, 0, Decision{Action: ActionDeadLetter, Class: ClassPermanent}},

		// A transient failure climbs one tier at a time, each with its own delay, then the DLQ.
		{"transient on main", transient(0), 0, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 1, Delay: 5 * s}},
		{"transient on tier 1", transient(0), 1, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 2, Delay: m}},
		{"transient on tier 2", transient(0), 2, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 3, Delay: 10 * m}},
		{"transient on the last tier", transient(0), 3, 0, Decision{Action: ActionDeadLetter, Class: ClassTransient}},
		{"transient on a tier beyond the list", transient(0), 4, 0, Decision{Action: ActionDeadLetter, Class: ClassTransient}},
		{"deadline", context.DeadlineExceeded, 0, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 1, Delay: 5 * s}},

		// Retry-After never skips a tier: every tier gets its attempt, and a
		// tier holds a record no longer than its own delay (docs/interface.md §5), so
		// a longer hint is honoured only up to that delay.
		{"Retry-After within the next tier", transient(5 * s), 0, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 1, Delay: 5 * s}},
		{"Retry-After past the next tier", transient(6 * s), 0, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 1, Delay: 5 * s}},
		{"Retry-After past two tiers", transient(2 * m), 0, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 1, Delay: 5 * s}},
		{"Retry-After past every tier", transient(time.Hour), 0, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 1, Delay: 5 * s}},
		{"Retry-After from tier 1", transient(2 * m), 1, 0, Decision{Action: ActionRetryTier, Class: ClassTransient, Tier: 2, Delay: m}},
		{"Retry-After on the last tier", transient(s), 3, 0, Decision{Action: ActionDeadLetter, Class: ClassTransient}},

		// An outage routes nothing: the same event waits, doubling from 500ms to 15s.
		{"outage, first attempt", outage(0), 0, 0, Decision{Action: ActionPause, Class: ClassOutage, Delay: 500 * time.Millisecond}},
		{"outage, third attempt", outage(0), 1, 2, Decision{Action: ActionPause, Class: ClassOutage, Delay: 2 * s}},
		{"outage, many attempts", outage(0), 0, 40, Decision{Action: ActionPause, Class: ClassOutage, Delay: 15 * s}},
		{"postgres outage under a transient", &TransientError{Op: "reserve", Err: &OutageError{Dependency: DependencyPostgres, Err: boom}}, 0, 0,
			Decision{Action: ActionPause, Class: ClassOutage, Delay: 500 * time.Millisecond}},
		// ... at least as long as Retry-After, never longer than 15s.
		{"outage with Retry-After", outage(3 * s), 0, 0, Decision{Action: ActionPause, Class: ClassOutage, Delay: 3 * s}},
		{"outage with a short Retry-After", outage(s), 0, 3, Decision{Action: ActionPause, Class: ClassOutage, Delay: 4 * s}},
		{"outage with a long Retry-After", outage(time.Hour), 0, 0, Decision{Action: ActionPause, Class: ClassOutage, Delay: 15 * s}},
		{"outage wrapping a 503 with Retry-After", &OutageError{Dependency: DependencyGateway, Err: transient(7 * s)}, 0, 0,
			Decision{Action: ActionPause, Class: ClassOutage, Delay: 7 * s}},

		// Shutdown is nobody's failure: routed nowhere, committed never.
		{"shutdown", fmt.Errorf("charge: %w", context.Canceled), 1, 0, Decision{Action: ActionLeave, Class: ClassCanceled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := p.Decide(tt.err, tt.tier, tt.attempt); got != tt.want {
				t.Errorf("Decide(tier %d, attempt %d) = %+v, want %+v", tt.tier, tt.attempt, got, tt.want)
			}
		})
	}
}

// Each tier waits for x-not-before at most its own delay; a tier beyond the
// configured list (left by a shortened BILLING_RETRY_DELAYS) takes the last.
func TestRetryPolicyTierDelay(t *testing.T) {
	t.Parallel()
	p := NewRetryPolicy(5*time.Second, time.Minute, 10*time.Minute)
	for _, tt := range []struct {
		tier int
		want time.Duration
	}{{0, 0}, {1, 5 * time.Second}, {2, time.Minute}, {3, 10 * time.Minute}, {4, 10 * time.Minute}} {
		if got := p.TierDelay(tt.tier); got != tt.want {
			t.Errorf("TierDelay(%d) = %v, want %v", tt.tier, got, tt.want)
		}
	}
	if got := NewRetryPolicy().TierDelay(1); got != 0 {
		t.Errorf("TierDelay without tiers = %v, want 0", got)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}
	for i, w := range want {
		if got := b.Delay(i); got != w {
			t.Errorf("Delay(%d) = %v, want %v", i, got, w)
		}
	}
}
