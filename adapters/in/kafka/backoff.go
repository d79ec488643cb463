package kafka

import (
	"time"

	"github.com/acme/billing/core/order"
)

// The adapter's own retries against Kafka. They are transport, not the
// domain's rules (order.RetryPolicy decides what happens to a failed
// event): short next to the tier delays, and long enough not to hammer a
// broker that is down.
const (
	// fetchMin and fetchMax space the attempts after a failed fetch or
	// group join.
	fetchMin, fetchMax = 100 * time.Millisecond, 5 * time.Second
	// writeMin and writeMax space the attempts of a routed write (to a
	// tier or the DLQ) that failed.
	writeMin, writeMax = 100 * time.Millisecond, 5 * time.Second
	// writeOutageAfter failed routed writes in a row mean Kafka is
	// unreachable for writes: consumption pauses, while the write goes on
	// being retried.
	writeOutageAfter = 3
)

// fetchDelay is the wait after failed fetch or join number failures (0 for
// the first).
func fetchDelay(failures int) time.Duration {
	return order.Backoff{Min: fetchMin, Max: fetchMax}.Delay(failures)
}

// writeDelay is the wait after failed routed write number attempt (0 for
// the first).
func writeDelay(attempt int) time.Duration {
	return order.Backoff{Min: writeMin, Max: writeMax}.Delay(attempt)
}
