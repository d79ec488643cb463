package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
)

var _ order.Outbox = (*Store)(nil)

// PublishPending implements order.Outbox: it makes the waiting rows durable
// (flushWAL), then one transaction claims those rows, holds them while
// publish runs, and deletes them when it succeeds. Both run on one
// connection, one after the other: behind PgBouncer the server connections
// are shared by every pod, and a relay that held one while it waited for
// another could wait for ever once the relays held them all. Published
// rows leave at once, so the table holds only what waits. A relay that
// dies after publishing and before its commit leaves its rows for the
// next pass: they are published again under the same event ids.
func (s *Store) PublishPending(ctx context.Context, limit int, publish func(ctx context.Context, events []order.InvoiceEvent) error) (int, error) {
	n := 0
	err := s.pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		flushed, err := flushWAL(ctx, conn)
		if err != nil || flushed == "" {
			return err
		}
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			n, err = claimAndPublish(ctx, tx, limit, flushed, publish)
			return err
		})
	})
	if err != nil {
		return 0, translate(ctx, fmt.Errorf("publish the outbox: %w", err))
	}
	return n, nil
}

// claimAndPublish claims up to limit rows committed in the snapshot
// flushed (queries/claim_outbox.sql), publishes them and deletes them, in tx; it returns how many.
func claimAndPublish(ctx context.Context, tx pgx.Tx, limit int, flushed string,
	publish func(ctx context.Context, events []order.InvoiceEvent) error) (int, error) {
	rows, _ := tx.Query(ctx, stmts.claimOutbox, limit, flushed)
	var (
		ids []int64
		// One set of targets for every row, rather than a set per row:
		// they escape to the heap through Scan's interface.
		r    = new(outboxScan)
		dest = []any{&r.id, &r.eventID, &r.e.OrderID, &r.status, &r.e.CustomerID, &r.e.Amount, &r.e.Currency, &r.key,
			&r.e.ChargeID, &r.e.Reason, &r.e.TraceParent, &r.occurred}
	)
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.InvoiceEvent, error) {
		r.e = order.InvoiceEvent{}
		if err := row.Scan(dest...); err != nil {
			return order.InvoiceEvent{}, err
		}
		ids = append(ids, r.id)
		e := r.e
		e.EventID, e.IdempotencyKey, e.Status, e.OccurredAt = r.eventID.Bytes, r.key.Bytes, r.status.s, r.occurred.Time
		return e, nil
	})
	if err != nil || len(events) == 0 {
		return 0, err
	}
	if err := publish(ctx, events); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, stmts.deletePublished, ids); err != nil {
		return 0, err
	}
	return len(events), nil
}

// flushWAL makes durable every outbox row committed before it and returns
// the snapshot that tells them (claim_outbox's $2; queries/flush_wal.sql
// says how); "" when the outbox is empty. The settles commit with synchronous_commit off (settleTx): for
// a moment a settle and its outbox row are visible and not yet on disk,
// and a crash then loses both. A relay that published such a row would
// leave a downstream service holding an event of a transition billing no
// longer has, and that transition made again later, after another in
// between, would reach it as a duplicate of an id it has seen.
func flushWAL(ctx context.Context, conn *pgxpool.Conn) (string, error) {
	results, err := conn.Conn().PgConn().Exec(ctx, stmts.flushWAL).ReadAll()
	if err != nil {
		return "", fmt.Errorf("flush the WAL before publishing: %w", err)
	}
	for _, r := range results {
		if len(r.Rows) == 1 && len(r.Rows[0]) == 2 {
			if string(r.Rows[0][1]) != "t" {
				return "", nil
			}
			return string(r.Rows[0][0]), nil
		}
	}
	return "", fmt.Errorf("flush the WAL before publishing: no snapshot in the reply")
}

// OutboxStats implements order.Outbox.
func (s *Store) OutboxStats(ctx context.Context) (order.OutboxStats, error) {
	var (
		st     order.OutboxStats
		oldest float64
	)
	err := s.pool.QueryRow(ctx, stmts.outboxStats).Scan(&st.Pending, &oldest)
	if err != nil {
		return st, translate(ctx, fmt.Errorf("outbox stats: %w", err))
	}
	st.Oldest = fromSeconds(oldest)
	return st, nil
}

// outboxScan is what claimAndPublish scans each row into.
type outboxScan struct {
	e        order.InvoiceEvent
	id       int64
	eventID  pgtype.UUID
	key      pgtype.UUID
	status   statusScan
	occurred pgtype.Timestamptz
}
