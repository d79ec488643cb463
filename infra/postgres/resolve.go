package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
)

// Resolve applies d, a person's decision, to orderID's invoice in one
// transaction, records it (who, when, the key, the status before and
// after, the hold's reason, the note) and returns the invoice before and
// after. It takes a held invoice, or a pending one whose key was first sent
// more than holdAfter ago (the pending completer should have held it), and
// only while it is under d.Key; a decision of reconciliation
// (order.CommandReconcileResolveHeld) takes a held invoice only, and only
// while its Reopens is d.Reopens. It refuses: an order without an invoice
// (order.ErrNoInvoice), an invoice under another key (order.ErrOtherKey),
// one that is neither held nor pending past holdAfter (order.ErrNotHeld), a
// resume of a key first sent more than holdAfter ago (order.ErrKeyTooOld),
// and a pending invoice whose attempt is alive (*order.AttemptBusyError:
// its request may be at the gateway). The invoice's row lock makes a
// concurrent resolve, or any pod, see one decision or none
// (queries/resolve_read.sql, queries/resolve.sql).
func (s *Store) Resolve(ctx context.Context, orderID string, d order.Resolution, holdAfter time.Duration) (before, after order.Invoice, err error) {
	switch d.Status {
	case order.StatusCharged, order.StatusDeclined, order.StatusRejected, order.StatusPending:
	default:
		return before, after, fmt.Errorf("resolve order %s: %q is not a decision", orderID, d.Status)
	}
	command := d.Command
	if command == "" {
		command = order.CommandInvoiceResolve
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			aged bool
			wait float64
		)
		before, err = scanInvoice(tx.QueryRow(ctx, stmts.resolveRead, orderID, seconds(holdAfter)), &aged, &wait)
		aged = aged && holdAfter > 0
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return order.ErrNoInvoice
		case err != nil:
			return err
		case before.EventID != d.Key:
			return fmt.Errorf("its key is %s, not %s: %w", before.EventID, d.Key, order.ErrOtherKey)
		case command == order.CommandReconcileResolveHeld && before.Status != order.StatusHeld:
			// Reconciliation settles held invoices only: a pending one past
			// half of its key's lifetime is a person's to look at.
			return fmt.Errorf("it is %s: %w", before.Status, order.ErrNotHeld)
		case command == order.CommandReconcileResolveHeld && before.Reopens != d.Reopens:
			return fmt.Errorf("it was resumed under its key since its records were read (reopens %d, read at %d): %w",
				before.Reopens, d.Reopens, order.ErrOtherKey)
		case before.Status == order.StatusPending && !aged:
			return fmt.Errorf("it is pending, its key first sent %s, and the service still resumes it: %w",
				sentAt(before), order.ErrNotHeld)
		case before.Status != order.StatusHeld && before.Status != order.StatusPending:
			return fmt.Errorf("it is %s: %w", before.Status, order.ErrNotHeld)
		case d.Status == order.StatusPending && aged:
			return fmt.Errorf("key first sent %s: %w", sentAt(before), order.ErrKeyTooOld)
		case wait > 0:
			return &order.AttemptBusyError{OrderID: orderID, Wait: fromSeconds(wait)}
		}
		after, err = scanInvoice(tx.QueryRow(ctx, stmts.resolve, orderID, string(d.Status), d.ChargeID,
			pgtype.UUID{Bytes: d.Key, Valid: true}, seconds(holdAfter), d.By, command, d.Note,
			string(before.Status), before.Reason, s.publish))
		if errors.Is(err, pgx.ErrNoRows) {
			// The row is locked and every condition was checked on it: only
			// the clock (an attempt alive by now()) can disagree.
			return &order.AttemptBusyError{OrderID: orderID}
		}
		return err
	})
	if err != nil {
		return order.Invoice{}, order.Invoice{}, translate(ctx, fmt.Errorf("resolve order %s: %w", orderID, err))
	}
	return before, after, nil
}

// sentAt is when inv's key was first sent, for an error.
func sentAt(inv order.Invoice) string {
	if inv.KeySentAt.IsZero() {
		return "never"
	}
	return inv.KeySentAt.UTC().Format(time.RFC3339)
}
