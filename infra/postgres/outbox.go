package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
)

var _ order.Outbox = (*Store)(nil)

// sqlClaimOutbox claims up to $1 events for one relay: the oldest waiting
// event of each order only, so that an order's events are published in
// the order of its transitions however many relays run (its next event is
// not the oldest while an earlier one waits, even one another relay
// holds), and FOR UPDATE SKIP LOCKED, so that relays in several pods
// never hold one row at once: each row is published by one process at a
// time. The claim is the relay's transaction; the rows are deleted in it
// once Kafka has acknowledged them.
const sqlClaimOutbox = `SELECT o.id, o.event_id, o.order_id, o.status, o.customer_id, o.amount, o.currency, o.idempotency_key,
		coalesce(o.charge_id, ''), coalesce(o.reason, ''), coalesce(o.traceparent, ''), o.occurred_at
	FROM invoice_outbox o
	WHERE NOT EXISTS (SELECT FROM invoice_outbox earlier WHERE earlier.order_id = o.order_id AND earlier.id < o.id)
	ORDER BY o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED`

// PublishPending implements order.Outbox: one transaction holds the claimed
// rows while publish runs, and deletes them when it succeeds; publish runs
// once they are durable (flushWAL). Published
// rows leave at once, so the table holds only what waits. A relay that
// dies after publishing and before its commit leaves its rows for the
// next pass: they are published again under the same event ids.
func (s *Store) PublishPending(ctx context.Context, limit int, publish func(ctx context.Context, events []order.InvoiceEvent) error) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, sqlClaimOutbox, limit)
		var ids []int64
		events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.InvoiceEvent, error) {
			var (
				e         order.InvoiceEvent
				id        int64
				eventID   pgtype.UUID
				key       pgtype.UUID
				status    string
				occurred  pgtype.Timestamptz
				chargeID  string
				reason    string
				traceprnt string
			)
			if err := row.Scan(&id, &eventID, &e.OrderID, &status, &e.CustomerID, &e.Amount, &e.Currency, &key,
				&chargeID, &reason, &traceprnt, &occurred); err != nil {
				return e, err
			}
			ids = append(ids, id)
			e.EventID, e.IdempotencyKey, e.Status = eventID.Bytes, key.Bytes, order.InvoiceStatus(status)
			e.ChargeID, e.Reason, e.TraceParent, e.OccurredAt = chargeID, reason, traceprnt, occurred.Time
			return e, nil
		})
		if err != nil || len(events) == 0 {
			return err
		}
		if err := s.flushWAL(ctx); err != nil {
			return err
		}
		if err := publish(ctx, events); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM invoice_outbox WHERE id = ANY ($1::bigint[])`, ids); err != nil {
			return err
		}
		n = len(events)
		return nil
	})
	if err != nil {
		return 0, translate(ctx, fmt.Errorf("publish the outbox: %w", err))
	}
	return n, nil
}

// sqlFlushWAL is a transaction that commits synchronously and waits for
// the WAL to be flushed past its commit record, so past every commit
// before it. It must write WAL of its own: Postgres commits a transaction
// that wrote none asynchronously, whatever synchronous_commit says (an xid
// alone is not enough). A transactional logical decoding message is the
// smallest such write: a record of a few bytes, no table, any role may
// emit it, at any wal_level; a logical decoding consumer sees it under the
// prefix billing.outbox-flush. One simple-protocol message (no
// parameters), one round trip, also through PgBouncer in transaction mode.
const sqlFlushWAL = `BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, 'billing.outbox-flush', ''); COMMIT`

// flushWAL returns once every transaction committed before the call is on
// disk. The settles commit with synchronous_commit off (settleTx): for a
// moment a settle and its outbox row are visible and not yet durable, and a
// crash then loses both. A relay that published such a row would leave a
// downstream service holding an event of a transition billing no longer
// has, and that transition made again later, after another in between,
// would reach it as a duplicate of the id it has seen. The claimed rows
// were committed before the claim read them, so this flush covers them.
func (s *Store) flushWAL(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, sqlFlushWAL); err != nil {
		return fmt.Errorf("flush the WAL before publishing: %w", err)
	}
	return nil
}

// OutboxStats implements order.Outbox.
func (s *Store) OutboxStats(ctx context.Context) (order.OutboxStats, error) {
	var (
		st     order.OutboxStats
		oldest float64
	)
	err := s.pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(occurred_at)), 0)::float8 FROM invoice_outbox`).
		Scan(&st.Pending, &oldest)
	if err != nil {
		return st, translate(ctx, fmt.Errorf("outbox stats: %w", err))
	}
	st.Oldest = fromSeconds(oldest)
	return st, nil
}
