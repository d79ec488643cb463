package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
)

// seedBilled writes, for every event, what the service writes when group
// bills it: the dedup row (event id, consumer group; the ids are UUIDv7s of
// now, so the row lands in today's partition of processed_event) and the
// order's invoice charged under the event's id, with a charge id of the
// gateway's form. A run that then consumes the same events finds each one
// seen (outcome duplicate), as a redelivery after a rebalance or a replay
// would; seeding takes a second where billing the events first would take
// as long as a measured run. It checkpoints afterwards, as truncate does,
// so that the measured run does not pay for the seed's dirty pages.
func seedBilled(ctx context.Context, e *env, group string, events []order.OrderConfirmedEvent) error {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// With the order the dedup row is for, and the invoice stamped with
		// the writing transaction's id (written_xact), as this release's
		// reserve and settle write them: see the check below.
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"processed_event"}, []string{"event_id", "consumer_group", "order_id"},
			pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
				return []any{pgtype.UUID{Bytes: events[i].EventID, Valid: true}, group, events[i].OrderID}, nil
			})); err != nil {
			return fmt.Errorf("seed processed_event: %w", err)
		}
		orders, ids, customers, amounts, currencies, charges := make([]string, len(events)), make([]pgtype.UUID, len(events)),
			make([]string, len(events)), make([]int64, len(events)), make([]string, len(events)), make([]string, len(events))
		for i, ev := range events {
			orders[i], ids[i], customers[i], amounts[i], currencies[i], charges[i] =
				ev.OrderID, pgtype.UUID{Bytes: ev.EventID, Valid: true}, ev.CustomerID, ev.TotalAmount, ev.Currency, chargeID()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, charge_id, written_xact)
			SELECT o, e, c, a, cur, $7, ch, pg_current_xact_id()
			FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::text[]) AS t(o, e, c, a, cur, ch)`,
			orders, ids, customers, amounts, currencies, charges, string(order.StatusCharged)); err != nil {
			return fmt.Errorf("seed invoice: %w", err)
		}
		// The service's rows land in a day partition; so must these, or the
		// run would measure lookups in the DEFAULT partition instead.
		var outside int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM processed_event_default`).Scan(&outside); err != nil {
			return fmt.Errorf("count seeded rows outside a day partition: %w", err)
		}
		if outside != 0 {
			return fmt.Errorf("seed: %d dedup rows outside a day partition", outside)
		}
		// Rows written as this release writes them are not published again:
		// migration 0006's triggers publish (and fence) only the writes of
		// a release that does not stamp them, and a seed they took for one
		// would have the run measure the relay publishing the whole seed.
		var queued int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM invoice_outbox`).Scan(&queued); err != nil {
			return fmt.Errorf("count invoice events the seed queued: %w", err)
		}
		if queued != 0 {
			return fmt.Errorf("seed: %d invoice events queued: the triggers of migrations/0006 took the seed for an older release's writes", queued)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// chargeID is an id of the form the gateway stub gives a charge.
func chargeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "ch_" + hex.EncodeToString(b[:])
}

// tableCounts are the rows a run left: invoices, charged ones, dedup rows.
type tableCounts struct{ invoices, charged, dedup int }

func countRows(ctx context.Context, e *env) (tableCounts, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return tableCounts{}, err
	}
	defer conn.Close(ctx)
	var t tableCounts
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM invoice), (SELECT count(*) FROM invoice WHERE status = 'charged'),
		(SELECT count(*) FROM processed_event)`).Scan(&t.invoices, &t.charged, &t.dedup)
	return t, err
}
