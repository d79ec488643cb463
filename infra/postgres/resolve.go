package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/core/order"
)

// sqlResolve applies a person's decision to a held invoice ($1 the order,
// $2 the new status, $3 the charge id): only while it is held and no
// attempt is alive (held invoices have none; the check keeps the fence's
// rule in this statement too). A decision writes the invoice event of its
// status when $4 (publishing on). A resumed invoice is pending again under
// its key, which publishes nothing: no attempt, due for the completer at
// once, and its updated_at back to when its key started (key_sent_at), the
// completer's and the gauges' clock.
const sqlResolve = `WITH moved AS (
		UPDATE invoice SET status = $2, charge_id = NULLIF($3, ''),
			reason = CASE WHEN $2 = 'rejected' THEN 'rejected by a person (billing invoice resolve)' ELSE NULL END,
			updated_at = CASE WHEN $2 = 'pending' THEN coalesce(key_sent_at, updated_at) ELSE now() END,
			attempt_until = NULL, next_resume_at = NULL, resume_attempts = 0,
			reopens = CASE WHEN $2 = 'pending' THEN reopens + 1 ELSE reopens END
		WHERE order_id = $1 AND status = 'held' AND (attempt_until IS NULL OR attempt_until <= now())
		RETURNING *
	), resolved_event AS (
		` + outboxInsert + `NULL FROM moved WHERE status <> 'pending' AND $4::boolean` + outboxOnConflict + `
	)
	SELECT ` + invoiceColumns + ` FROM moved`

// Resolve applies d, a person's decision, to orderID's held invoice in one
// transaction, and returns the invoice before and after. It refuses an
// invoice that is not held (order.ErrNotHeld) and a resume of a key first
// sent longer than holdAfter ago (order.ErrKeyTooOld); the invoice's row
// lock makes a concurrent resolve, or any pod, see one decision or none.
func (s *Store) Resolve(ctx context.Context, orderID string, d order.Resolution, holdAfter time.Duration) (before, after order.Invoice, err error) {
	switch d.Status {
	case order.StatusCharged, order.StatusDeclined, order.StatusRejected, order.StatusPending:
	default:
		return before, after, fmt.Errorf("resolve order %s: %q is not a decision", orderID, d.Status)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var aged bool
		before, err = scanInvoice(tx.QueryRow(ctx, `SELECT `+invoiceColumns+`,
				coalesce(key_sent_at <= now() - make_interval(secs => $2::float8), false)
			FROM invoice WHERE order_id = $1 FOR UPDATE`, orderID, seconds(holdAfter)), &aged)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return order.ErrNoInvoice
		case err != nil:
			return err
		case before.Status != order.StatusHeld:
			return fmt.Errorf("it is %s: %w", before.Status, order.ErrNotHeld)
		case d.Status == order.StatusPending && holdAfter > 0 && aged:
			return fmt.Errorf("key first sent %s: %w", before.KeySentAt.UTC().Format(time.RFC3339), order.ErrKeyTooOld)
		}
		after, err = scanInvoice(tx.QueryRow(ctx, sqlResolve, orderID, string(d.Status), d.ChargeID, s.publish))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("an attempt of it is alive: %w", order.ErrNotHeld)
		}
		return err
	})
	if err != nil {
		return order.Invoice{}, order.Invoice{}, translate(ctx, fmt.Errorf("resolve order %s: %w", orderID, err))
	}
	return before, after, nil
}
