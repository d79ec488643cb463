package httpgateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/acme/billing/core/order"
)

// BreakerSettings are the circuit breaker's thresholds, and the streak of
// calls without a reply that makes an outage at any rate. The breaker opens
// when, within the last Window, at least MinRequests calls finished and at
// least FailureRatio of them failed. A failure is a call that says the
// gateway is unwell: a 5xx, a 429, no reply (network error, timeout), a
// reply it broke (headers over MaxReplyHeaderBytes). A decline, a 409, any
// other 4xx or 2xx is a working gateway and counts as a success; a call
// the caller canceled (or whose caller's deadline passed) counts as
// neither. While open, calls fail at once with an OutageError;
// after CoolDown one probe call goes through, and its success closes the
// breaker, its failure opens it again.
type BreakerSettings struct {
	Window       time.Duration // default 10s
	MinRequests  uint32        // default 20
	FailureRatio float64       // default 0.9
	CoolDown     time.Duration // default 5s
	// ConsecutiveNoReply calls in a row that got no reply (could not
	// connect, timed out) make the gateway an outage, whatever the rate;
	// default 3.
	ConsecutiveNoReply int32
}

// Breaker defaults (CONTRACT.md §4: "the gateway failing nearly every call").
const (
	DefaultBreakerWindow       = 10 * time.Second
	DefaultBreakerMinRequests  = 20
	DefaultBreakerFailureRatio = 0.9
	DefaultBreakerCoolDown     = 5 * time.Second
	// DefaultConsecutiveNoReply is "its last few calls all failing to
	// connect or timing out" (CONTRACT.md §4): few enough that a slow
	// stream pauses before its events go through the tiers, more than one
	// so that a single lost connection stays an event's transient error.
	DefaultConsecutiveNoReply = 3
)

// breakerBuckets is how many buckets the rolling window has: calls leave the
// window a tenth of it at a time rather than all at once.
const breakerBuckets = 10

// verdict is what one call says about the gateway's health.
type verdict int

const (
	verdictHealthy verdict = iota
	verdictUnhealthy
	verdictNoReply  // unhealthy, and the gateway did not answer at all
	verdictExcluded // the caller gave up: says nothing either way
)

// judged carries a call's error and verdict through gobreaker, which sees
// only the error; Charge unwraps it before returning.
type judged struct {
	err error
	v   verdict
}

func (j *judged) Error() string { return j.err.Error() }
func (j *judged) Unwrap() error { return j.err }

// gobreaker is used rather than a breaker of our own: its rolling window
// (BucketPeriod), IsExcluded for canceled calls and generation counting
// (a late result from before a state change is ignored) are exactly what is
// needed, and are what a home-made one gets subtly wrong.
func newBreaker(s BreakerSettings, log *slog.Logger) (*gobreaker.CircuitBreaker[order.ChargeResult], time.Duration) {
	if s.Window <= 0 {
		s.Window = DefaultBreakerWindow
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultBreakerMinRequests
	}
	if s.FailureRatio <= 0 || s.FailureRatio > 1 {
		s.FailureRatio = DefaultBreakerFailureRatio
	}
	if s.CoolDown <= 0 {
		s.CoolDown = DefaultBreakerCoolDown
	}
	bucket := max(s.Window/breakerBuckets, time.Millisecond)
	verdictOf := func(err error) verdict {
		if j, ok := errors.AsType[*judged](err); ok { // Charge's closure wraps every error it returns
			return j.v
		}
		return verdictHealthy // nil: a charge or a decline
	}
	return gobreaker.NewCircuitBreaker[order.ChargeResult](gobreaker.Settings{
		Name:         "payment-gateway",
		MaxRequests:  1, // one probe in half-open
		Interval:     s.Window,
		BucketPeriod: bucket,
		Timeout:      s.CoolDown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			done := c.TotalSuccesses + c.TotalFailures
			return done >= s.MinRequests && float64(c.TotalFailures) >= s.FailureRatio*float64(done)
		},
		IsSuccessful: func(err error) bool { v := verdictOf(err); return v != verdictUnhealthy && v != verdictNoReply },
		IsExcluded:   func(err error) bool { return verdictOf(err) == verdictExcluded },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			level := slog.LevelInfo
			if to == gobreaker.StateOpen {
				level = slog.LevelWarn
			}
			// No request context here: a state change belongs to no one call.
			log.Log(context.Background(), level, "payment gateway circuit breaker",
				slog.String("from", from.String()), slog.String("to", to.String()))
		},
	}), s.CoolDown
}
