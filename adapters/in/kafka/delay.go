package kafka

import (
	"time"

	"github.com/acme/billing/adapters/in/kafka/wire"
)

// eventTime is when the order happened, the start of the delay SLI
// (billing_event_delay_seconds): its occurred_at, or the record's timestamp
// when that cannot be read. On a retry tier the record's timestamp is the
// routing time, so a readable occurred_at keeps the retries' delay in. The
// occurred_at the handler noted when it decoded the event comes first:
// decoding the value again cost as much as the handler's own decode.
func eventTime(msg Record) time.Time {
	if msg.dated != nil && !msg.dated.IsZero() {
		return *msg.dated
	}
	if t, ok := wire.OccurredAt(msg.Value); ok {
		return t
	}
	return msg.Time
}

// replayed reports whether msg was written back by `billing dlq replay`:
// its x-replayed-at is an RFC 3339 time (another value is no replay's mark).
func replayed(msg Record) bool {
	v, ok := msg.Header(HeaderReplayedAt)
	if !ok {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, v)
	return err == nil
}
