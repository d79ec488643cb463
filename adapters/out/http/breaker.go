package httpgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerSettings say when the gateway is down (docs/interface.md §4: "the gateway
// refusing the service itself, or failing nearly every call, or its last
// few calls all failing to connect or timing out"). The breaker opens on
// any of three kinds of evidence:
//
//   - the service's own credentials refused (401, 403): at once;
//   - ConsecutiveNoReply calls in a row that could not connect (refused,
//     unreachable, DNS, TLS) or got no reply within the timeout: at any rate;
//   - within the last Window, at least MinRequests calls finished and at
//     least FailureRatio of them failed: a 5xx, a 429, a reply broken (headers
//     over MaxReplyHeaderBytes, a malformed reply) or lost after the request
//     was sent, or any call of the kind above.
//
// A lost reply (a connection closed after the request was sent) is that
// call's unknown outcome, retried under its key: it counts against the
// ratio, so a gateway that loses nearly every reply is down, but it is no
// part of the streak and ends one, so that a few lost replies among
// successes never are. A decline, a 409, any other 4xx or 2xx is a working
// gateway; a call the caller canceled (or whose caller's deadline passed)
// counts as neither.
//
// While open, calls fail at once with an OutageError and reach nothing;
// after CoolDown one probe call goes through, every other failing at once,
// and its success closes the breaker, its failure opens it again. Calls
// that were in flight when the breaker changed state belong to what came
// before: their results count for nothing (gobreaker's generations), so the
// calls of an outage that a probe has ended cannot make a new one.
type BreakerSettings struct {
	Window       time.Duration // default 10s
	MinRequests  uint32        // default 20
	FailureRatio float64       // default 0.9
	CoolDown     time.Duration // default 5s
	// ConsecutiveNoReply calls in a row that could not connect or timed
	// out make the gateway an outage, whatever the rate; default 3.
	ConsecutiveNoReply int32
}

// Breaker defaults (docs/interface.md §4: "the gateway failing nearly every call").
const (
	DefaultBreakerWindow       = 10 * time.Second
	DefaultBreakerMinRequests  = 20
	DefaultBreakerFailureRatio = 0.9
	DefaultBreakerCoolDown     = 5 * time.Second
	// DefaultConsecutiveNoReply is "its last few calls all failing to
	// connect or timing out" (docs/interface.md §4): few enough that a slow
	// stream pauses before its events go through the tiers, more than one
	// so that a single lost connection stays an event's transient error.
	DefaultConsecutiveNoReply = 3
)

// breakerBuckets is how many buckets the rolling window has: calls leave the
// window a tenth of it at a time rather than all at once.
const breakerBuckets = 10

// Verdict is what one call says about the provider's health, for the
// circuit breaker (BreakerSettings). A Judge gives the first three; a
// Caller judges calls without a reply itself.
type Verdict int

// The verdicts.
const (
	// VerdictHealthy: a working provider (a charge, a decline, a refusal of
	// this request, a reply the adapter could not use but that the
	// provider made on purpose).
	VerdictHealthy Verdict = iota
	// VerdictUnhealthy: a 5xx or 429, a reply broken or lost after the
	// request was sent: the ratio.
	VerdictUnhealthy
	// VerdictRefused: 401, 403, the service's credentials refused: opens
	// the breaker at once.
	VerdictRefused
	verdictUnreachable // could not connect, or no reply within the timeout: the ratio and the streak
	verdictExcluded    // the caller gave up: says nothing either way
)

// failed reports whether the verdict counts against the provider.
func (v Verdict) failed() bool {
	return v == VerdictUnhealthy || v == verdictUnreachable || v == VerdictRefused
}

// judged carries a call's error and verdict through gobreaker, which sees
// only the error; doOnce unwraps it before returning.
type judged struct {
	err error
	v   Verdict
}

func (j *judged) Error() string { return j.err.Error() }
func (j *judged) Unwrap() error { return j.err }

// gobreaker is used rather than a breaker of our own: its rolling window
// (BucketPeriod), IsExcluded for canceled calls and generation counting
// (a late result from before a state change is ignored) are exactly what is
// needed, and are what a home-made one gets subtly wrong. The streak and the
// refusal are kept beside its counts, in its callbacks, so that they too
// see only the calls of its current generation.
func newBreaker(s BreakerSettings, log *slog.Logger) (*gobreaker.CircuitBreaker[struct{}], time.Duration) {
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
	if s.ConsecutiveNoReply <= 0 {
		s.ConsecutiveNoReply = DefaultConsecutiveNoReply
	}
	bucket := max(s.Window/breakerBuckets, time.Millisecond)
	verdictOf := func(err error) Verdict {
		if j, ok := errors.AsType[*judged](err); ok { // doOnce's closure wraps every error it returns
			return j.v
		}
		return VerdictHealthy // nil: a result the judge kept
	}
	// The evidence of the current generation beyond gobreaker's counts. Only
	// gobreaker's callbacks touch it, and it calls them under its own lock,
	// for the calls of its current generation alone.
	var (
		streak  int32  // calls in a row that could not connect or timed out
		refused bool   // the service's credentials were refused
		why     string // the evidence that opened the breaker, for the log
	)
	return gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "payment-gateway",
		MaxRequests:  1, // one probe in half-open
		Interval:     s.Window,
		BucketPeriod: bucket,
		Timeout:      s.CoolDown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			done := c.TotalSuccesses + c.TotalFailures
			switch {
			case refused:
				why = "the service's credentials refused (401, 403)"
			case streak >= s.ConsecutiveNoReply:
				why = fmt.Sprintf("the last %d calls could not connect or timed out", streak)
			case done >= s.MinRequests && float64(c.TotalFailures) >= s.FailureRatio*float64(done):
				why = fmt.Sprintf("%d of the last %d calls failed", c.TotalFailures, done)
			default:
				return false
			}
			return true
		},
		IsSuccessful: func(err error) bool {
			v := verdictOf(err)
			switch v {
			case verdictUnreachable:
				streak++
			case VerdictRefused:
				refused = true
			default:
				streak = 0 // a reply, or a connection that carried the request
			}
			return !v.failed()
		},
		IsExcluded: func(err error) bool { return verdictOf(err) == verdictExcluded },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			attrs := []slog.Attr{slog.String("from", from.String()), slog.String("to", to.String())}
			level := slog.LevelInfo
			if to == gobreaker.StateOpen {
				level = slog.LevelWarn
				if from == gobreaker.StateHalfOpen {
					why = "the probe failed"
				}
				attrs = append(attrs, slog.String("evidence", why), slog.Duration("probe_in", s.CoolDown))
			}
			streak, refused, why = 0, false, ""
			// No request context here: a state change belongs to no one call.
			log.LogAttrs(context.Background(), level, "payment gateway circuit breaker", attrs...)
		},
	}), s.CoolDown
}
