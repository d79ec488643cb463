package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/core/order"
)

var _ order.PendingLedger = (*Store)(nil)

// ClaimPending implements order.PendingLedger (queries/claim_pending.sql).
func (s *Store) ClaimPending(ctx context.Context, c order.PendingClaim) ([]order.Invoice, error) {
	rows, _ := s.pool.Query(ctx, stmts.claimPending,
		c.OlderThan.Seconds(), c.Limit, c.Backoff.Seconds(), c.MaxBackoff.Seconds())
	invs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.Invoice, error) { return scanInvoice(row) })
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("claim pending invoices: %w", err))
	}
	return invs, nil
}

// PendingStats implements order.PendingLedger from the partial indexes on
// pending and held invoices, and the newest reconcile_run row, in one
// pipeline.
func (s *Store) PendingStats(ctx context.Context) (order.PendingStats, error) {
	var (
		st     order.PendingStats
		oldest float64
	)
	b := &pgx.Batch{}
	b.Queue(stmts.pendingStats).QueryRow(func(row pgx.Row) error {
		return row.Scan(&st.Count, &oldest, &st.Held)
	})
	b.Queue(stmts.reconcileLastRun).QueryRow(func(row pgx.Row) error { return scanLastReconcile(row, &st.Reconcile) })
	err := s.pool.SendBatch(ctx, b).Close()
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
	rows, _ := s.pool.Query(ctx, stmts.holdStale, seconds(terms.HoldAfter), order.ReasonKeyAged, s.publish)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("hold stale invoices: %w", err))
	}
	return held, nil
}
