package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/core/order"
)

var _ order.PendingLedger = (*Store)(nil)

// sqlClaimPending takes the due pending invoices, oldest key first, and
// moves each one's next attempt past its back-off in the same statement.
// FOR UPDATE SKIP LOCKED lets completers of several pods claim at once
// without waiting for each other: a row another claim holds is skipped, and
// one it has just committed is re-checked on its new next_resume_at, which
// is in the future. updated_at is left alone: it is when the key started,
// the clock of BILLING_PENDING_RESUME_AFTER and of the gauges.
//
// An UPDATE returns its rows in no particular order, so the claimed rows
// are sorted again on the way out: the pass resumes the oldest first.
const sqlClaimPending = `WITH claimed AS (
		UPDATE invoice SET resume_attempts = resume_attempts + 1,
			next_resume_at = now() + make_interval(secs => least($3 * power(2, least(resume_attempts, 30)), $4))
		WHERE order_id IN (
			SELECT order_id FROM invoice
			WHERE status = 'pending' AND updated_at < now() - make_interval(secs => $1)
				AND (next_resume_at IS NULL OR next_resume_at <= now())
			ORDER BY updated_at
			LIMIT $2
			FOR UPDATE SKIP LOCKED)
		RETURNING *)
	SELECT ` + invoiceColumns + ` FROM claimed ORDER BY updated_at, order_id`

// ClaimPending implements order.PendingLedger.
func (s *Store) ClaimPending(ctx context.Context, c order.PendingClaim) ([]order.Invoice, error) {
	rows, _ := s.pool.Query(ctx, sqlClaimPending,
		c.OlderThan.Seconds(), c.Limit, c.Backoff.Seconds(), c.MaxBackoff.Seconds())
	invs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.Invoice, error) { return scanInvoice(row) })
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("claim pending invoices: %w", err))
	}
	return invs, nil
}

// PendingStats implements order.PendingLedger from the partial indexes on
// pending and held invoices.
func (s *Store) PendingStats(ctx context.Context) (order.PendingStats, error) {
	var (
		st     order.PendingStats
		oldest float64
	)
	err := s.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM invoice WHERE status = 'pending'),
			(SELECT coalesce(extract(epoch FROM now() - min(updated_at)), 0)::float8 FROM invoice WHERE status = 'pending'),
			(SELECT count(*) FROM invoice WHERE status = 'held')`).Scan(&st.Count, &oldest, &st.Held)
	if err != nil {
		return st, translate(ctx, fmt.Errorf("pending stats: %w", err))
	}
	st.Oldest = fromSeconds(oldest)
	return st, nil
}

// HoldStale implements order.PendingLedger.
func (s *Store) HoldStale(ctx context.Context, terms order.AttemptTerms) ([]string, error) {
	if terms.HoldAfter <= 0 {
		return nil, nil
	}
	rows, _ := s.pool.Query(ctx, sqlHoldStale, seconds(terms.HoldAfter), order.ReasonKeyAged, s.publish)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("hold stale invoices: %w", err))
	}
	return held, nil
}
