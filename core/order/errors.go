package order

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ValidationError says an event breaks a rule of the contract. It is
// permanent: the same bytes will never become valid.
type ValidationError struct {
	Field  string // JSON member, or "" for the value as a whole
	Reason string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "invalid event: " + e.Reason
	}
	return fmt.Sprintf("invalid event: %s: %s", e.Field, e.Reason)
}

// PermanentError is a failure of this event that retrying will not fix
// (a 4xx from the gateway other than 402/409/429, for example).
type PermanentError struct {
	Op  string
	Err error
}

func (e *PermanentError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// RefusalKind says how the gateway refused a charge for good (docs/interface.md §6).
type RefusalKind int

const (
	// RefusalRejected: 400, 404 or another 4xx not named elsewhere. The
	// gateway did not execute the request (it stores no result for a request
	// that failed validation), so no money moved under the key: the invoice
	// becomes rejected and the next event of the order may reopen it.
	RefusalRejected RefusalKind = iota + 1
	// RefusalKeyReused: 422, the key was used before with another body
	// (at Stripe: a 400 of type idempotency_error). Money may have moved
	// under it: the invoice is held for a person.
	RefusalKeyReused
	// RefusalIndeterminate: the gateway answered in a way that does not say
	// whether money moved, and says that asking again under the key will
	// not tell more (at Stripe: a success state billing does not know, a
	// 5xx with Stripe-Should-Retry: false, whose result Stripe replays for
	// the key). Held for a person, like RefusalKeyReused.
	RefusalIndeterminate
)

// ChargeRefusedError is the gateway's permanent refusal of one charge. The
// gateway client returns it inside a *PermanentError; billing tells the two
// kinds apart with errors.As.
type ChargeRefusedError struct {
	Kind       RefusalKind
	StatusCode int
	Err        error
}

func (e *ChargeRefusedError) Error() string {
	switch e.Kind {
	case RefusalKeyReused:
		return "charge refused, key used with another body: " + e.Err.Error()
	case RefusalIndeterminate:
		return "charge outcome unknown: " + e.Err.Error()
	}
	return "charge rejected: " + e.Err.Error()
}
func (e *ChargeRefusedError) Unwrap() error { return e.Err }

// TransientError is a failure of this event that may succeed later: a
// gateway timeout, 5xx or 429, a 409 "in progress", a serialization failure
// that outlived in-place retries. RetryAfter is how long the failing party
// asked to be left alone (a gateway's Retry-After), zero when unknown;
// RetryPolicy.Decide does not retry sooner.
type TransientError struct {
	Op         string
	Err        error
	RetryAfter time.Duration
}

func (e *TransientError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }

// AttemptBusyError says another path (another event of the order, a retry
// tier, the pending completer, another pod) holds the attempt of the
// order's pending invoice: its key may be at the gateway right now
// (docs/interface.md §4, one attempt per key at a time). Nothing was sent. The
// event waits in place and tries again; it is not routed, and it gives way
// uncommitted when its partition is revoked or the process stops.
type AttemptBusyError struct {
	OrderID string
	// Wait is how long the other attempt may still live (0: it has ended,
	// or the invoice moved on: try again now).
	Wait time.Duration
}

func (e *AttemptBusyError) Error() string {
	return fmt.Sprintf("order %s: another attempt of its invoice is in flight (for up to %v)", e.OrderID, e.Wait)
}

// HeldError says the order's invoice is held for a person (docs/interface.md §4):
// by this event's 422, by its key's age, or before this event arrived. It
// is permanent: the record goes to the DLQ, to be replayed once the person
// has decided (`billing invoice resolve`).
type HeldError struct {
	OrderID string
	Reason  string
	Err     error // the gateway's refusal, when a 422 held it
}

func (e *HeldError) Error() string {
	msg := "order " + e.OrderID + ": invoice held for a person (billing invoice resolve): " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}
func (e *HeldError) Unwrap() error { return e.Err }

// ErrNotPending: the invoice a path meant to resume is no longer pending
// under the key it knew (settled, rejected, reopened or held since).
var ErrNotPending = errors.New("invoice no longer pending under this key")

// Dependency names a service billing cannot work without. An outage of one
// pauses consumption until a probe of that same dependency succeeds.
type Dependency string

// The dependencies of billing.
const (
	DependencyPostgres Dependency = "postgres"
	DependencyKafka    Dependency = "kafka"
	DependencyGateway  Dependency = "gateway"
)

// OutageError says a dependency as a whole is unavailable (Postgres or Kafka
// unreachable, the gateway failing nearly every call or refusing the
// service's credentials). It is not a failure of the event: the consumer
// pauses and tries the same event again later. RetryAfter is how long the
// dependency asked to be left alone (a gateway's Retry-After), zero when it
// did not say.
type OutageError struct {
	Dependency Dependency
	Err        error
	RetryAfter time.Duration
}

func (e *OutageError) Error() string { return string(e.Dependency) + " unavailable: " + e.Err.Error() }
func (e *OutageError) Unwrap() error { return e.Err }

// Class is what the consumer does with a failed event.
type Class int

const (
	// ClassPermanent: route to the DLQ, then commit.
	ClassPermanent Class = iota
	// ClassTransient: route to the next retry tier (or the DLQ after the last), then commit.
	ClassTransient
	// ClassOutage: route nowhere, pause, retry the same event.
	ClassOutage
	// ClassCanceled: shutdown; route nowhere, commit nothing.
	ClassCanceled
	// ClassBusy: another path's attempt of the invoice is in flight; wait
	// in place, route nowhere, commit nothing until it is final.
	ClassBusy
)

func (c Class) String() string {
	switch c {
	case ClassPermanent:
		return "permanent"
	case ClassTransient:
		return "transient"
	case ClassOutage:
		return "outage"
	case ClassCanceled:
		return "canceled"
	case ClassBusy:
		return "busy"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Classify is the one place that maps an error to its class;
// RetryPolicy.Decide turns the class into what happens to the event, and when.
// Adapters translate driver errors into the typed errors above; anything
// untyped is permanent, so that it is looked at rather than retried forever.
// An outage wins over the others, so a wrapped chain that reached an
// unavailable dependency is never dead-lettered.
func Classify(err error) Class {
	var (
		oe *OutageError
		te *TransientError
		pe *PermanentError
		ve *ValidationError
		ce *ChargeRefusedError
		be *AttemptBusyError
		he *HeldError
	)
	switch {
	case errors.As(err, &oe):
		return ClassOutage
	case errors.Is(err, context.Canceled):
		return ClassCanceled
	case errors.As(err, &be):
		return ClassBusy
	case errors.As(err, &ve), errors.As(err, &pe), errors.As(err, &ce), errors.As(err, &he):
		return ClassPermanent
	case errors.As(err, &te), errors.Is(err, context.DeadlineExceeded):
		return ClassTransient
	}
	return ClassPermanent
}
