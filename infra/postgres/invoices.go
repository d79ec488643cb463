package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/acme/billing/core/order"
)

// What a person reads before deciding on an invoice (`billing invoice list`
// and `billing invoice show`, docs/interface.md §1): no psql, no knowledge of the
// schema. Read-only; each call is one statement (or, for show, one
// pipeline) on the caller's pool, far from the hot path.

// InvoiceFilter selects the invoices ListInvoices returns.
type InvoiceFilter struct {
	// Status: only invoices in it ("": every status, held and pending
	// first).
	Status order.InvoiceStatus
	// OlderThan: only invoices in their status for at least this long.
	OlderThan time.Duration
	// Limit bounds the rows (at least 1).
	Limit int
}

// InvoiceSummary is one invoice as `billing invoice list` shows it.
type InvoiceSummary struct {
	order.Invoice
	// Since is when the invoice reached its status; for a pending one,
	// when its current key started (the completer's and the gauges'
	// clock). Age is how long ago that was, by Postgres's clock.
	Since time.Time
	Age   time.Duration
	// ResumeAttempts counts the pending completer's claims of it under its
	// current key.
	ResumeAttempts int
}

// ListInvoices returns the invoices f selects, held first (waiting for a
// person, oldest first), then pending (waiting for the service, oldest
// first), then rejected (waiting for the order's next event) and the
// settled ones, newest first. Each group is one statement, read only while
// the limit leaves room (queries/list_oldest.sql, queries/list_newest.sql).
func (s *Store) ListInvoices(ctx context.Context, f InvoiceFilter) ([]InvoiceSummary, error) {
	limit := max(f.Limit, 1)
	var list []InvoiceSummary
	query := func(sql string, status any) error {
		if len(list) >= limit {
			return nil
		}
		rows, _ := s.pool.Query(ctx, sql, status, seconds(f.OlderThan), limit-len(list))
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (InvoiceSummary, error) { return scanSummary(row) })
		list = append(list, got...)
		return err
	}
	settled := []string{string(order.StatusRejected), string(order.StatusCharged), string(order.StatusDeclined)}
	var err error
	switch f.Status {
	case "":
		err = errors.Join(query(stmts.listOldest, string(order.StatusHeld)), query(stmts.listOldest, string(order.StatusPending)),
			query(stmts.listNewest, settled))
	case order.StatusHeld, order.StatusPending:
		err = query(stmts.listOldest, string(f.Status))
	default:
		err = query(stmts.listNewest, []string{string(f.Status)})
	}
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("list invoices: %w", err))
	}
	return list, nil
}

// scanSummary reads a row of an invoice's summary, the invoice's columns
// (scanInvoice) then when and how long ago it reached its status and its
// resume attempts (queries/list_oldest.sql), and after them extra.
func scanSummary(row pgx.Row, extra ...any) (InvoiceSummary, error) {
	var (
		sum InvoiceSummary
		age float64
	)
	inv, err := scanInvoice(row, append([]any{&sum.Since, &age, &sum.ResumeAttempts}, extra...)...)
	if err != nil {
		return sum, err
	}
	sum.Invoice, sum.Age = inv, fromSeconds(age)
	return sum, nil
}

// InvoiceDetail is one invoice as `billing invoice show` shows it: the
// summary, its attempts, the gateway's answers, the decisions made on it
// and its invoice events still waiting to be published.
type InvoiceDetail struct {
	InvoiceSummary
	// Now is Postgres's clock when it was read: every deadline below is on it.
	Now time.Time
	// UpdatedAt is Since; AttemptID and AttemptUntil the last attempt
	// taken (AttemptUntil zero: none, or it ended with an answer);
	// AttemptAlive whether it may still be in flight.
	AttemptID    int64
	AttemptUntil time.Time
	AttemptAlive bool
	// NextResumeAt is when the pending completer may claim it next (zero:
	// as soon as it is due).
	NextResumeAt time.Time
	// Answers are the gateway's answers recorded for it, oldest first
	// (migrations/0007: the newest 16).
	Answers []Answer
	// Decisions are every decision made on it, oldest first.
	Decisions []Decision
	// OutboxWaiting counts its invoice events not yet published.
	OutboxWaiting int
}

// Answer is one entry of an invoice's history of gateway answers.
type Answer struct {
	At     time.Time
	Key    uuid.UUID
	Answer string // order.AnswerOf's line, order.AnswerNone or order.AnswerUnsent
}

// Decision is one row of the decision table: a person's decision.
type Decision struct {
	ID       int64
	At       time.Time
	By       string
	Command  string    // order.CommandInvoiceResolve, …
	Key      uuid.UUID // the key it applied to
	Before   string    // the invoice's status before, and after
	After    string
	ChargeID string
	Reason   string // the invoice's reason when decided (a hold's reason)
	Note     string
	OrderID  string // "" for a decision on the consumption switch
}

// ShowInvoice returns orderID's invoice in detail (order.ErrNoInvoice when
// the order has none), read in one pipeline, one snapshot.
func (s *Store) ShowInvoice(ctx context.Context, orderID string) (InvoiceDetail, error) {
	var (
		d     InvoiceDetail
		found bool
	)
	b := &pgx.Batch{}
	b.Queue(stmts.showInvoice, orderID).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				until, next pgtype.Timestamptz
				answers     []string
			)
			sum, err := scanSummary(rows, &d.Now, &d.AttemptID, &until, &d.AttemptAlive, &next, &answers, &d.OutboxWaiting)
			if err != nil {
				return err
			}
			found, d.InvoiceSummary = true, sum
			if until.Valid {
				d.AttemptUntil = until.Time
			}
			if next.Valid {
				d.NextResumeAt = next.Time
			}
			for _, a := range answers {
				d.Answers = append(d.Answers, parseAnswer(a))
			}
		}
		return rows.Err()
	})
	b.Queue(stmts.decisionsOf, orderID).Query(func(rows pgx.Rows) error {
		ds, err := pgx.CollectRows(rows, scanDecision)
		d.Decisions = ds
		return err
	})
	if err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	}); err != nil {
		return InvoiceDetail{}, translate(ctx, fmt.Errorf("show invoice %s: %w", orderID, err))
	}
	if !found {
		return InvoiceDetail{}, fmt.Errorf("show invoice %s: %w", orderID, order.ErrNoInvoice)
	}
	return d, nil
}

// scanDecision reads a row of queries/decisions_of.sql.
func scanDecision(row pgx.CollectableRow) (Decision, error) {
	var (
		d   Decision
		key pgtype.UUID
	)
	err := row.Scan(&d.ID, &d.At, &d.By, &d.Command, &d.OrderID, &key, &d.Before, &d.After, &d.ChargeID, &d.Reason, &d.Note)
	if key.Valid {
		d.Key = uuid.UUID(key.Bytes)
	}
	return d, err
}

// parseAnswer reads an entry of invoice.answers, "<time> <key> <answer>"
// (migrations/0007, invoice_answers_push); an entry it cannot read is kept
// whole as the answer.
func parseAnswer(s string) Answer {
	at, rest, ok1 := strings.Cut(s, " ")
	key, answer, ok2 := strings.Cut(rest, " ")
	t, err1 := time.Parse(time.RFC3339, at)
	k, err2 := uuid.FromString(key)
	if !ok1 || !ok2 || errors.Join(err1, err2) != nil {
		return Answer{Answer: s}
	}
	return Answer{At: t, Key: k, Answer: answer}
}
