package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/core/order"
)

// What `billing reconcile` reads and keeps (docs/interface.md §1, §8;
// docs/design.md, "Reconciliation"): the invoices of a period, those of
// given orders, and each run's result, which the service exports. Its
// decisions on held invoices go through Resolve, as a person's do.

// reconcileBatch bounds the order ids of one InvoicesOf statement.
const reconcileBatch = 5000

// InvoicesCreated returns the invoices created in p, oldest first.
func (s *Store) InvoicesCreated(ctx context.Context, p order.Period) ([]order.Invoice, error) {
	rows, _ := s.pool.Query(ctx, stmts.reconcileInvoicesCreated, p.From, p.To)
	invs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.Invoice, error) { return scanInvoice(row) })
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("read the invoices created %s: %w", p, err))
	}
	return invs, nil
}

// InvoicesOf returns the invoices of orderIDs that exist, in no order.
func (s *Store) InvoicesOf(ctx context.Context, orderIDs []string) ([]order.Invoice, error) {
	var out []order.Invoice
	for start := 0; start < len(orderIDs); start += reconcileBatch {
		batch := orderIDs[start:min(start+reconcileBatch, len(orderIDs))]
		rows, _ := s.pool.Query(ctx, stmts.reconcileInvoicesOf, batch)
		invs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.Invoice, error) { return scanInvoice(row) })
		if err != nil {
			return nil, translate(ctx, fmt.Errorf("read the invoices of %d orders: %w", len(batch), err))
		}
		out = append(out, invs...)
	}
	return out, nil
}

// ReconcileRun is one completed `billing reconcile` run, as RecordReconcile
// keeps it.
type ReconcileRun struct {
	order.ReconcileResult
	Started  time.Time
	Provider string // config.ProviderGeneric or config.ProviderStripe
	By       string // --by NAME; "" when not given
	Host     string // where it ran (the CronJob's pod); "" when unknown
}

// RecordReconcile keeps run and returns when it finished, by Postgres's
// clock.
func (s *Store) RecordReconcile(ctx context.Context, run ReconcileRun) (time.Time, error) {
	d := run.Discrepancies
	var at time.Time
	err := s.pool.QueryRow(ctx, stmts.reconcileRecordRun, run.Started, run.Period.From, run.Period.To,
		run.Provider, run.By, run.Host, run.Orders,
		d[order.DiscrepancyMoneyWithoutCharged], d[order.DiscrepancyChargedWithoutMoney], d[order.DiscrepancyAmountMismatch], d[order.DiscrepancyDoubleCharge],
		run.HeldSettled, run.HeldLeft).Scan(&at)
	if err != nil {
		return time.Time{}, translate(ctx, fmt.Errorf("record the reconcile run: %w", err))
	}
	return at, nil
}

// LastReconcile returns the newest completed run (its At zero when there
// is none, every kind at 0).
func (s *Store) LastReconcile(ctx context.Context) (order.ReconcileResult, error) {
	var r order.ReconcileResult
	err := scanLastReconcile(s.pool.QueryRow(ctx, stmts.reconcileLastRun), &r)
	if err != nil {
		return order.ReconcileResult{}, translate(ctx, fmt.Errorf("read the last reconcile run: %w", err))
	}
	return r, nil
}

// scanLastReconcile reads reconcile_last_run's row into r; no row leaves r
// as no run, every kind at 0.
func scanLastReconcile(row pgx.Row, r *order.ReconcileResult) error {
	var money, charged, amount, double int
	err := row.Scan(&r.At, &r.Period.From, &r.Period.To, &r.Orders, &money, &charged, &amount, &double, &r.HeldSettled, &r.HeldLeft)
	if errors.Is(err, pgx.ErrNoRows) {
		*r = order.ReconcileResult{}
		err = nil
	}
	r.Discrepancies = map[order.DiscrepancyKind]int{
		order.DiscrepancyMoneyWithoutCharged: money, order.DiscrepancyChargedWithoutMoney: charged,
		order.DiscrepancyAmountMismatch: amount, order.DiscrepancyDoubleCharge: double,
	}
	return err
}
