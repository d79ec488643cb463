package postgres

import (
	"context"

	"github.com/acme/billing/core/order"
)

// TxAttempts is how many times in all retry runs a transaction that meets
// conflicts: the retry policy's in-place limit.
var TxAttempts = order.NewRetryPolicy().InPlaceAttempts

// Retry runs attempt under the in-place retry policy of Reserve and Settle
// and translates the result as they do, so the external tests can drive it
// with failures Reserve and Settle cannot be made to meet on demand.
func (s *Store) Retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	return translate(ctx, s.retry(ctx, attempt))
}

// SQLAsyncCommit exposes sqlAsyncCommit to the external tests.
const SQLAsyncCommit = sqlAsyncCommit

// QueuedReserves is how many Reserve calls wait in the queue for a group.
func (s *Store) QueuedReserves() int {
	s.reserves.mu.Lock()
	defer s.reserves.mu.Unlock()
	return len(s.reserves.queue)
}
