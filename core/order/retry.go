package order

import (
	"errors"
	"fmt"
	"time"
)

// RetryPolicy answers what happens to a failed event, and when: the retry
// tiers, the wait of an event held by an outage, the looks of an event
// waiting for another path's attempt. internal/app builds it once from the
// configuration (NewRetryPolicy, then the configured tier delays) and hands
// it to the consumers (Decide). The transports' own retries (a failed
// fetch, a failed routed write, a transaction the server rolled back for a
// conflict, reaching a dependency at start) are their adapters' business,
// not the domain's.
//
// A party that asks for a pause (the gateway's Retry-After, carried by
// TransientError and OutageError) is not asked again sooner, as far as the
// tiers and the outage back-off can wait: see Decide.
type RetryPolicy struct {
	// TierDelays holds one delay per retry tier (BILLING_RETRY_DELAYS):
	// retry tier n does not handle a record sooner than TierDelays[n-1]
	// after it was routed there. After the last tier, the DLQ.
	TierDelays []time.Duration
	// Outage spaces the attempts of an event held by an outage (Postgres,
	// Kafka or the gateway unavailable): the same event is tried again, as
	// a probe, after Outage.Delay(attempt).
	Outage Backoff
	// Busy spaces the looks of an event waiting for another path's attempt
	// of its invoice (ClassBusy); it never waits past the time that attempt
	// may still live.
	Busy Backoff
}

// NewRetryPolicy returns the service's policy with tierDelays as the retry
// tiers. The schedules are not part of the public configuration: they are
// short next to the tier delays, and long enough not to hammer a dependency
// that is down.
func NewRetryPolicy(tierDelays ...time.Duration) RetryPolicy {
	return RetryPolicy{
		TierDelays: tierDelays,
		Outage:     Backoff{Min: 500 * time.Millisecond, Max: 15 * time.Second},
		// The other attempt usually ends within a gateway round trip; one
		// whose pod died lives out its AttemptTerms.Life (15s by default).
		Busy: Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second},
	}
}

// Action is what happens to a failed event.
type Action int

const (
	// ActionLeave: shutdown interrupted the event. It is routed nowhere and
	// not committed; whoever owns its partition next handles it again.
	ActionLeave Action = iota
	// ActionPause: an outage. Consumption pauses and the same event is
	// tried again after Decision.Delay; nothing is routed.
	ActionPause
	// ActionRetryTier: the record goes to retry tier Decision.Tier, not to
	// be handled before Decision.Delay from now (x-not-before); then the
	// source offset is committed.
	ActionRetryTier
	// ActionDeadLetter: the record goes to the DLQ; then the source offset
	// is committed.
	ActionDeadLetter
	// ActionWait: another path's attempt of the invoice is in flight. The
	// same event looks again after Decision.Delay; nothing is routed, and a
	// rebalance or shutdown meanwhile leaves it uncommitted.
	ActionWait
)

func (a Action) String() string {
	switch a {
	case ActionLeave:
		return "leave"
	case ActionPause:
		return "pause"
	case ActionRetryTier:
		return "retry tier"
	case ActionDeadLetter:
		return "dead-letter"
	case ActionWait:
		return "wait"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is the policy's answer for one failure.
type Decision struct {
	Action Action
	Class  Class         // the failure's class (x-error-class)
	Tier   int           // ActionRetryTier: the tier the record goes to
	Delay  time.Duration // ActionPause, ActionWait: wait before the next attempt; ActionRetryTier: x-not-before from now
}

// Decide answers for err, met by an event read from tier (0: the main
// topic) on its attempt-th try in place (0 for the first; outages and busy
// invoices retry in place). The class comes from Classify.
//
// A transient failure goes to the next tier, always: every configured tier
// gets its attempt. A tier holds a record no longer than its own delay
// (x-not-before is clamped to it, docs/interface.md §5), so a gateway's Retry-After
// longer than that delay is honoured only up to it; skipping tiers to wait
// longer would give a 429 fewer attempts than configured.
//
// An outage waits at least the Retry-After hint, up to Outage.Max, so a
// held event does not probe a gateway that asked for quiet, and a hostile
// or mistaken hint cannot stall consumption longer than Outage.Max.
//
// A busy invoice is looked at again on the Busy schedule, never later than
// the other attempt's end.
func (p RetryPolicy) Decide(err error, tier, attempt int) Decision {
	class := Classify(err)
	switch class {
	case ClassCanceled:
		return Decision{Action: ActionLeave, Class: class}
	case ClassOutage:
		return Decision{Action: ActionPause, Class: class, Delay: max(p.Outage.Delay(attempt), min(retryAfter(err), p.Outage.Max))}
	case ClassBusy:
		wait := p.Busy.Min
		if be, ok := errors.AsType[*AttemptBusyError](err); ok {
			wait = max(be.Wait, p.Busy.Min)
		}
		return Decision{Action: ActionWait, Class: class, Delay: min(wait, p.Busy.Delay(attempt))}
	case ClassTransient:
		if next := tier + 1; next <= len(p.TierDelays) {
			return Decision{Action: ActionRetryTier, Class: class, Tier: next, Delay: p.TierDelays[next-1]}
		}
	}
	return Decision{Action: ActionDeadLetter, Class: class}
}

// TierDelay is the delay of retry tier n, the longest a record of that tier
// waits for its x-not-before; a tier beyond the configured ones (left by a
// shortened BILLING_RETRY_DELAYS) has the last delay, the main topic (0)
// none.
func (p RetryPolicy) TierDelay(n int) time.Duration {
	if n < 1 || len(p.TierDelays) == 0 {
		return 0
	}
	return p.TierDelays[min(n, len(p.TierDelays))-1]
}

// retryAfter is the longest pause that the failing party asked for in err's
// chain (zero: none asked).
func retryAfter(err error) time.Duration {
	var (
		d  time.Duration
		te *TransientError
		oe *OutageError
	)
	if errors.As(err, &te) {
		d = te.RetryAfter
	}
	if errors.As(err, &oe) {
		d = max(d, oe.RetryAfter)
	}
	return max(d, 0)
}

// Backoff is a schedule of waits that doubles from Min up to Max. It has no
// jitter: the goroutines retrying in one process are few, and the brokers
// and Postgres see one process each. It is a value, the schedule only: the
// waiting is done by whoever retries.
type Backoff struct{ Min, Max time.Duration }

// Delay is the wait after failure number attempt (0 for the first).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Min
	for i := 0; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}
