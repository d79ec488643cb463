package kafka

import (
	"time"

	"github.com/acme/billing/core/order"
)

// eventTime is when the order happened, the start of the delay SLI
// (billing_event_delay_seconds): its occurred_at, or the record's timestamp
// when that cannot be read. On a retry tier the record's timestamp is the
// routing time, so a readable occurred_at keeps the retries' delay in.
func eventTime(msg Record) time.Time {
	if t, ok := order.OccurredAt(msg.Value); ok {
		return t
	}
	return msg.Time
}
