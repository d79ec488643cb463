package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/service"
)

const (
	// rollbackTimeout bounds a rollback made after ctx ended.
	rollbackTimeout = 5 * time.Second
)

// Store runs billing's transactions against a pool: order.Ledger for the
// service (Reserve, Settle), order.PendingLedger for the pending completer,
// and reads for probes, tools and tests.
//
// Reserve and Settle are grouped: the calls of concurrent events that queue
// while earlier groups are at the server go as one set-based statement and
// one commit (grouper; queries/reserve_group.sql, queries/settle_group.sql). Each event keeps
// its own dedup row, invoice and answer; a group that fails is sent again
// one event at a time, so a failure stays the event's own. With few events
// in flight a call finds a runner free and goes alone at once: grouping
// adds no wait, it only takes the round trips and the WAL flushes of many
// events at once when they would otherwise queue for connections. That is
// what lets a pod keep hundreds of events in flight on a handful of
// connections (config.DefaultDBMaxConns).
type Store struct {
	pool     *pgxpool.Pool
	reserves *grouper[reserveReq, order.Reservation]
	settles  *grouper[settleReq, bool]
	// publish: every transition writes its invoice event to the outbox
	// (BILLING_PUBLISH_EVENTS, WithEvents).
	publish bool
}

var _ order.Ledger = (*Store)(nil)

// StoreOption configures NewStore.
type StoreOption func(*storeOptions)

type storeOptions struct {
	publish  bool
	groups   int
	maxGroup int
	observe  func(op string, events int)
}

// WithEvents makes every transition of an invoice into charged, declined,
// rejected or held write its invoice event to the outbox, in the
// transition's own statement (docs/interface.md §9). Off by default.
func WithEvents(on bool) StoreOption { return func(o *storeOptions) { o.publish = on } }

// WithGroupObserver has observe told the size of each group sent, op being
// "reserve" or "settle" (billing_db_group_events).
func WithGroupObserver(observe func(op string, events int)) StoreOption {
	return func(o *storeOptions) { o.observe = observe }
}

// defaultGroups is how many groups of each kind (reserve, settle) a pool of
// maxConns connections sends at once: one per 8 connections, at least one
// (so one of each with the default pool). Fewer groups at the server means
// larger ones, each costing the server one statement, one commit and one
// round trip however many events it holds, and where the database shares
// its CPUs that is what bounds events/s: `make bench` at in-flight 64 and a
// 0 ms gateway billed faster with one group of each kind at a time than with
// two, the server using less CPU for more events. The rest of the pool
// stays free for the completer, the maintenance and the probes.
func defaultGroups(maxConns int) int { return max(1, maxConns/8) }

// defaultMaxGroup bounds the events of one group statement: past a hundred
// or so the statement's own work dominates and the round trip saved is
// noise, while the group's rows stay locked for longer.
const defaultMaxGroup = 128

// NewStore returns a Store using pool; the caller keeps owning the pool.
func NewStore(pool *pgxpool.Pool, opts ...StoreOption) *Store {
	o := storeOptions{maxGroup: defaultMaxGroup}
	for _, opt := range opts {
		opt(&o)
	}
	if o.groups <= 0 {
		o.groups = defaultGroups(int(pool.Config().MaxConns))
	}
	s := &Store{pool: pool, publish: o.publish}
	// The connections groups go on encode the groups' arrays themselves
	// (arrays.go).
	acquire := func(ctx context.Context) (*pgxpool.Conn, error) {
		conn, err := pool.Acquire(ctx)
		if err == nil {
			installFastArrays(conn.Conn().TypeMap())
		}
		return conn, err
	}
	observe := func(op string) func(int) {
		if o.observe == nil {
			return nil
		}
		return func(n int) { o.observe(op, n) }
	}
	s.reserves = &grouper[reserveReq, order.Reservation]{
		limit: o.groups, max: o.maxGroup, acquire: acquire, run: s.reserveGroup, observe: observe("reserve"),
		// The order and the event id: one of each per statement; and one
		// consumer group and one set of attempt terms, which the statement
		// takes once.
		// The event id's 16 bytes rather than its text: one string to build.
		key: func(ks []string, r reserveReq) []string {
			return append(ks, "o:"+r.inv.OrderID, "e:"+string(r.inv.EventID[:]))
		},
		joins: func(first, r reserveReq) bool { return first.group == r.group && first.terms == r.terms },
	}
	s.settles = &grouper[settleReq, bool]{
		limit: o.groups, max: o.maxGroup, acquire: acquire, run: s.settleGroup, observe: observe("settle"),
		key: func(ks []string, r settleReq) []string { return append(ks, r.OrderID) },
	}
	return s
}

// Close waits for the goroutines that send the grouped reserves and
// settles, and makes every later Reserve or Settle fail as a Postgres
// outage. Call it once the store's callers are done, before the pool
// closes (internal/app does, in Close). It does not close the pool.
func (s *Store) Close() {
	s.reserves.close()
	s.settles.close()
}

type reserveReq struct {
	inv     order.Invoice
	group   string
	terms   order.AttemptTerms
	attempt int64 // the attempt id this event takes if it may send
}

// newAttemptID returns a random attempt id, never 0 (no attempt): ids only
// tell one path's attempt from another's, so 63 random bits make a clash
// between two attempts of one invoice a non-event.
func newAttemptID() int64 {
	for {
		if id := rand.Int64(); id != 0 {
			return id
		}
	}
}

// Reserve is the reserve transaction of order.Ledger, grouped with the
// reserves of concurrent events (Store); see reserveGroup.
func (s *Store) Reserve(ctx context.Context, inv order.Invoice, group string, terms order.AttemptTerms) (order.Reservation, error) {
	req := reserveReq{inv: inv, group: group, terms: terms, attempt: newAttemptID()}
	r, alone, err := s.reserves.do(ctx, req)
	if alone {
		var rs []order.Reservation
		if rs, err = s.reserveGroup(ctx, s.pool, []reserveReq{req}); err == nil {
			r = rs[0]
		}
	}
	if isDefaultPartitionRace(err) {
		return r, partitionRaceError(inv.EventID, err)
	}
	if err != nil {
		return r, translate(ctx, fmt.Errorf("reserve order %s event %s: %w", inv.OrderID, inv.EventID, err))
	}
	return r, nil
}

// seconds is d in the seconds a statement's make_interval takes.
func seconds(d time.Duration) float64 { return d.Seconds() }

// reserveGroup runs the reserve transaction of reqs (distinct orders and
// event ids, one consumer group, one set of terms) in one round trip:
// reserve_group, then the read of their invoices FOR UPDATE, in one
// pipeline (a pgx batch) that Postgres runs as one implicit transaction,
// committed at its Sync, rolled back whole if either statement fails. Rows
// are sent in order_id order, so that concurrent groups lock invoices in
// the same order. A serialization failure or deadlock runs it again
// (retry). The error is not translated.
func (s *Store) reserveGroup(ctx context.Context, q batchSender, reqs []reserveReq) ([]order.Reservation, error) {
	idx := byOrderID(len(reqs), func(i int) string { return reqs[i].inv.OrderID })
	var (
		orders     = make([]string, len(reqs))
		events     = make([]pgtype.UUID, len(reqs))
		customers  = make([]string, len(reqs))
		amounts    = make([]int64, len(reqs))
		currencies = make([]string, len(reqs))
		attempts   = make([]int64, len(reqs))
		byOrder    = make(map[string]int, len(reqs))
		terms      = reqs[0].terms
	)
	for j, i := range idx {
		r := reqs[i]
		orders[j], events[j], customers[j], amounts[j], currencies[j], attempts[j] =
			r.inv.OrderID, pgtype.UUID{Bytes: r.inv.EventID, Valid: true}, r.inv.CustomerID, r.inv.Amount, r.inv.Currency, r.attempt
		byOrder[r.inv.OrderID] = i
	}
	life, holdAfter := seconds(terms.Life), seconds(terms.HoldAfter)
	out := make([]order.Reservation, len(reqs))
	err := s.retry(ctx, func(ctx context.Context) error {
		clear(out)
		b := &pgx.Batch{}
		if len(reqs) == 1 {
			// A group of one (every event, while they are few) as the
			// per-event statement: for one row the set-based one costs
			// the server more (bench: the two pgbench ceilings at G 1).
			b.Queue(stmts.reserveOne, orders[0], events[0], customers[0], amounts[0], currencies[0], attempts[0], reqs[0].group,
				life, holdAfter, order.ReasonKeyAged, s.publish).
				QueryRow(func(row pgx.Row) error { return row.Scan(&out[0].FirstSeen, &out[0].Reopened, &out[0].Held) })
		} else {
			b.Queue(stmts.reservePrelude)
			b.Queue(stmts.reserveGroup, orders, events, customers, amounts, currencies, attempts, reqs[0].group,
				life, holdAfter, order.ReasonKeyAged, s.publish).Query(func(rows pgx.Rows) error {
				var (
					orderID                   string
					firstSeen, reopened, held bool
				)
				_, err := pgx.ForEachRow(rows, []any{&orderID, &firstSeen, &reopened, &held}, func() error {
					i, ok := byOrder[orderID]
					if !ok {
						return fmt.Errorf("reserve returned order %q, which it was not sent", orderID)
					}
					out[i].FirstSeen, out[i].Reopened, out[i].Held = firstSeen, reopened, held
					return nil
				})
				return err
			})
		}
		b.Queue(stmts.invoicesForUpdate, orders).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					attempt int64
					wait    float64
				)
				inv, err := scanInvoice(rows, &attempt, &wait)
				if err != nil {
					return err
				}
				i, ok := byOrder[inv.OrderID]
				if !ok {
					return fmt.Errorf("reserve read order %q, which it was not sent", inv.OrderID)
				}
				out[i].Invoice, out[i].Found = inv, true
				switch {
				case inv.Status == order.StatusPending && attempt == reqs[i].attempt:
					out[i].Attempt = attempt
				case inv.Status == order.StatusPending, inv.Status == order.StatusRejected:
					// A rejected invoice's attempt is alive only when a
					// release without the fence wrote beside this one
					// (migrations/0006): it is reopened once that ends.
					out[i].Wait = fromSeconds(wait)
				}
			}
			return rows.Err()
		})
		return q.SendBatch(ctx, b).Close()
	})
	return out, err
}

// fromSeconds is a statement's seconds as a Duration.
func fromSeconds(s float64) time.Duration { return time.Duration(max(s, 0) * float64(time.Second)) }

// TakeAttempt is order.Ledger's TakeAttempt: take_attempt and the read of
// the invoice, one pipeline, one transaction. Not grouped: the pending
// completer takes one invoice at a time, far from the hot path.
func (s *Store) TakeAttempt(ctx context.Context, orderID string, key uuid.UUID, terms order.AttemptTerms) (order.Take, error) {
	attempt := newAttemptID()
	var t order.Take
	err := s.retry(ctx, func(ctx context.Context) error {
		t = order.Take{}
		b := &pgx.Batch{}
		b.Queue(stmts.takeAttempt, orderID, pgtype.UUID{Bytes: key, Valid: true}, attempt, seconds(terms.Life), seconds(terms.HoldAfter),
			order.ReasonKeyAged, s.publish).QueryRow(func(row pgx.Row) error { return row.Scan(&t.Held) })
		b.Queue(stmts.invoicesForUpdate, []string{orderID}).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					got  int64
					wait float64
				)
				inv, err := scanInvoice(rows, &got, &wait)
				if err != nil {
					return err
				}
				t.Invoice, t.Found = inv, true
				if inv.Status == order.StatusPending && inv.EventID == key {
					if got == attempt {
						t.Attempt = attempt
					} else {
						t.Wait = fromSeconds(wait)
					}
				}
			}
			return rows.Err()
		})
		return s.pool.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return order.Take{}, translate(ctx, fmt.Errorf("take the attempt of order %s key %s: %w", orderID, key, err))
	}
	return t, nil
}

// Release is order.Ledger's Release.
func (s *Store) Release(ctx context.Context, orderID string, key uuid.UUID, attempt int64, answer string) error {
	if _, err := s.pool.Exec(ctx, stmts.releaseAttempt, orderID, pgtype.UUID{Bytes: key, Valid: true}, attempt, answer); err != nil {
		return translate(ctx, fmt.Errorf("release the attempt of order %s: %w", orderID, err))
	}
	return nil
}

// byOrderID returns the indexes 0…n-1 sorted by orderID(i): a group's rows
// go to the server in order_id order, so that concurrent groups lock
// invoices in one order and cannot deadlock on them.
func byOrderID(n int, orderID func(i int) string) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(orderID(a), orderID(b)) })
	return idx
}

// errNotFinal rejects settling an invoice to a state that is not final.
var errNotFinal = errors.New("status is not final")

// settleReq is a settle and the trace of the event that caused it, which
// its invoice event carries (docs/interface.md §9).
type settleReq struct {
	order.Settlement
	traceparent string
}

// Settle is the settle transaction of order.Ledger, grouped with the
// settles of concurrent events (Store); see settleGroup.
func (s *Store) Settle(ctx context.Context, st order.Settlement) (bool, error) {
	if !st.Status.Final() {
		return false, TranslateError(fmt.Errorf("settle invoice %s to %q: %w", st.OrderID, st.Status, errNotFinal))
	}
	req := settleReq{Settlement: st}
	if s.publish {
		req.traceparent = traceParent(ctx)
	}
	settled, alone, err := s.settles.do(ctx, req)
	if alone {
		var ss []bool
		if ss, err = s.settleGroup(ctx, s.pool, []settleReq{req}); err == nil {
			settled = ss[0]
		}
	}
	if err != nil {
		return false, translate(ctx, fmt.Errorf("settle invoice %s: %w", st.OrderID, err))
	}
	return settled, nil
}

// traceParent is the W3C traceparent of ctx's span, "" when it has none.
func traceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}

// settleGroup moves each invoice of reqs (distinct orders) from pending
// under its key to its final status in one statement (settle_group),
// committed without waiting for its WAL flush, and reports which it moved:
// false when one was already final, holds another key (reopened since), or
// does not exist. The error is not translated.
//
// Why the settle need not be durable. The reserve is: money moves only
// after it committed, flushed, so an invoice is pending under its key, its
// attempt taken, before any request with that key exists. A settle only
// records the gateway's answer to that key. If Postgres crashes and loses
// a settle it had acknowledged (the last few wal_writer_delay of such
// commits; a crash of the service loses nothing, the server has the
// commit), the invoice is again what it was before: pending under the key
// that was sent, its attempt as the sender left it (alive until its end).
// And nothing durable can have built on the lost settle: WAL is flushed in
// order, so the flushed commit of a later reserve (a reopen under a new
// key) flushes every settle before it; a lost settle is lost together with
// everything after it. What remains outside Postgres is the gateway's
// record of the key, the DLQ record or the committed offset of the event.
// Nothing then sends a different key: the next path that reaches the
// order (a redelivery, a replay, a new event, the pending completer, once
// the attempt has ended) takes the attempt under the recorded key, and the
// gateway answers that key again as it did:
//   - charged: the replay of the first execution (docs/interface.md §6), with
//     its charge id; settled again;
//   - declined: the replay of the 402; settled again;
//   - rejected: the gateway stored nothing for the 4xx, so the same key
//     with the same body is refused again (no money moved under it) and
//     the invoice is rejected again; an event that would have reopened it
//     meanwhile is dead-lettered instead, and its replay reopens the order
//     (the same event id for the same order it was first seen with);
//   - held: a 422 is answered again for as long as the gateway keeps the
//     key, and the service resumes a key only within the first half of
//     that lifetime (AttemptTerms.HoldAfter), so the invoice is held again;
//     one past it is held without being sent.
//
// A lost settle therefore costs a gateway round trip and some time, never
// a second charge; a flushed settle would make every event wait on the
// disk a second time. The tests of this crash are
// TestLostSettleIsRedoneFromTheGatewayReplay (the row put back as the lost
// settle leaves it, for each final status) and
// TestSettlesSurviveAPostgresCrash (a real immediate shutdown of a durable
// server right after a group of settles was acknowledged).
func (s *Store) settleGroup(ctx context.Context, q batchSender, reqs []settleReq) ([]bool, error) {
	idx := byOrderID(len(reqs), func(i int) string { return reqs[i].OrderID })
	var (
		orders   = make([]string, len(reqs))
		keys     = make([]pgtype.UUID, len(reqs))
		attempts = make([]int64, len(reqs))
		statuses = make([]string, len(reqs))
		charges  = make([]string, len(reqs))
		reasons  = make([]string, len(reqs))
		causes   = make([]string, len(reqs))
		answers  = make([]string, len(reqs))
		byOrder  = make(map[string]int, len(reqs))
	)
	for j, i := range idx {
		r := reqs[i]
		orders[j], keys[j], attempts[j], statuses[j], charges[j], reasons[j], causes[j], answers[j] =
			r.OrderID, pgtype.UUID{Bytes: r.Key, Valid: true}, r.Attempt, string(r.Status), r.ChargeID, r.Reason, r.traceparent, r.Answer
		byOrder[r.OrderID] = i
	}
	out := make([]bool, len(reqs))
	err := s.retry(ctx, func(ctx context.Context) error {
		clear(out)
		b := &pgx.Batch{}
		b.Queue(stmts.settlePrelude)
		if len(reqs) == 1 {
			// As in reserveGroup: one row, the per-event statement.
			b.Queue(stmts.settleOne, orders[0], keys[0], attempts[0], statuses[0], charges[0], reasons[0], causes[0], s.publish, answers[0]).
				QueryRow(func(row pgx.Row) error {
					var n int
					err := row.Scan(&n)
					out[0] = n == 1
					return err
				})
			return q.SendBatch(ctx, b).Close()
		}
		b.Queue(stmts.settleGroup, orders, keys, attempts, statuses, charges, reasons, causes, s.publish, answers).Query(func(rows pgx.Rows) error {
			var orderID string
			_, err := pgx.ForEachRow(rows, []any{&orderID}, func() error {
				i, ok := byOrder[orderID]
				if !ok {
					return fmt.Errorf("settle returned order %q, which it was not sent", orderID)
				}
				out[i] = true
				return nil
			})
			return err
		})
		return q.SendBatch(ctx, b).Close()
	})
	return out, err
}

// txRuns is how many times in all retry runs a transaction the server
// rolled back for a conflict; then the event fails as a TransientError and
// the consumer's retry policy takes over.
const txRuns = 3

// conflictBackoff spaces those runs: long enough for the conflicting
// transaction to finish, short next to an event's handling time; three
// runs never reach its Max.
var conflictBackoff = order.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}

// conflictDelay answers for a transaction rolled back for a conflict on its
// run-th run (1 for the first): whether to run it again, and after about how
// long (retry jitters it). false: give up.
func conflictDelay(run int) (time.Duration, bool) {
	if run >= txRuns {
		return 0, false
	}
	return conflictBackoff.Delay(run - 1), true
}

// retry runs one transaction attempt, and again after a serialization
// failure or deadlock (and the DEFAULT-partition race), as conflictDelay
// says, jittered, as long as ctx lasts. The returned error is not
// translated.
func (s *Store) retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		base, again := conflictDelay(n)
		if !retryableInPlace(err) || !again || ctx.Err() != nil {
			return err
		}
		pause := time.Duration(float64(base) * (0.5 + rand.Float64()))
		if !service.Sleep(ctx, pause) {
			return fmt.Errorf("postgres: retry transaction: %w (after %w)", ctx.Err(), err)
		}
	}
}

// rollback ends tx even when ctx has ended: a cancelled caller must not
// leave its connection inside a transaction. Its error is of no use to the
// caller, who already has the error that caused the rollback; a connection
// whose rollback fails is closed by pgx.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// Ping checks that Postgres answers, for /readyz.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping: %w", translate(ctx, err))
	}
	return nil
}

// Invoices returns every invoice ordered by order_id, for tests, the demo
// and end-to-end checks.
func (s *Store) Invoices(ctx context.Context) ([]order.Invoice, error) {
	rows, _ := s.pool.Query(ctx, stmts.invoicesAll)
	invs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (order.Invoice, error) { return scanInvoice(row) })
	if err != nil {
		return nil, translate(ctx, fmt.Errorf("list invoices: %w", err))
	}
	return invs, nil
}
