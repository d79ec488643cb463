package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// processed_event is partitioned by RANGE (event_id), one partition per UTC
// day (migrations/0002_partition_processed_event.sql explains why). These
// names and bounds are shared with that migration, and the names with the
// maintainer's statements (queries/dedup_*.sql).
const (
	dedupTable       = "processed_event"
	defaultPartition = "processed_event_default"
	// dayPartitionPrefix starts the name of every day partition, followed by
	// the day as YYYYMMDD. Maintenance drops only partitions so named.
	dayPartitionPrefix = "processed_event_p"
	day                = 24 * time.Hour
)

// uuidV7Floor returns the smallest UUIDv7 made at or after t: t's 48-bit
// Unix millisecond timestamp, big-endian, then 80 zero bits. Postgres
// compares uuids byte by byte, so every UUIDv7 made in [a, b) lies in
// [uuidV7Floor(a), uuidV7Floor(b)). Times before 1970 give the nil UUID.
func uuidV7Floor(t time.Time) uuid.UUID {
	var u uuid.UUID
	ms := max(t.UnixMilli(), 0)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ms))
	copy(u[:6], b[2:])
	return u
}

// uuidV7Time returns the time in u's 48-bit millisecond timestamp field.
func uuidV7Time(u uuid.UUID) time.Time {
	var ms int64
	for _, b := range u[:6] {
		ms = ms<<8 | int64(b)
	}
	return time.UnixMilli(ms).UTC()
}

// utcDay returns the start of t's UTC day.
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// dayPartition names and bounds the partition of the UTC day starting at
// start: [uuidV7Floor(start), uuidV7Floor(start + 24h)).
func dayPartition(start time.Time) partition {
	return partition{
		name:    dayPartitionPrefix + start.Format("20060102"),
		lo:      uuidV7Floor(start),
		hi:      uuidV7Floor(start.Add(day)),
		bounded: true,
	}
}

// partition is one partition of processed_event as the catalog shows it.
type partition struct {
	name      string
	isDefault bool
	bounded   bool // lo and hi are uuids (not MINVALUE or MAXVALUE)
	lo, hi    uuid.UUID
}

// overlaps reports whether p's range and [lo, hi) share an id. An unbounded
// range partition is taken to overlap everything: never create next to one.
func (p partition) overlaps(lo, hi uuid.UUID) bool {
	if p.isDefault {
		return false
	}
	if !p.bounded {
		return true
	}
	return bytesLess(p.lo, hi) && bytesLess(lo, p.hi)
}

// dayOwned reports whether maintenance made p and may drop it.
func (p partition) dayOwned() bool {
	return p.bounded && !p.isDefault && strings.HasPrefix(p.name, dayPartitionPrefix)
}

func bytesLess(a, b uuid.UUID) bool { return slices.Compare(a[:], b[:]) < 0 }

// boundRE matches pg_get_expr(relpartbound) of a range partition with
// literal bounds.
var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-fA-F-]{36})'\) TO \('([0-9a-fA-F-]{36})'\)$`)

// listPartitions returns processed_event's partitions ordered by name.
func listPartitions(ctx context.Context, q querier) ([]partition, error) {
	rows, _ := q.Query(ctx, stmts.dedupPartitions)
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (partition, error) {
		var name, bound string
		if err := row.Scan(&name, &bound); err != nil {
			return partition{}, err
		}
		p := partition{name: name, isDefault: bound == "DEFAULT"}
		if m := boundRE.FindStringSubmatch(bound); m != nil {
			lo, lerr := uuid.FromString(m[1])
			hi, herr := uuid.FromString(m[2])
			if err := errors.Join(lerr, herr); err != nil {
				return partition{}, fmt.Errorf("partition %s bound %q: %w", name, bound, err)
			}
			p.bounded, p.lo, p.hi = true, lo, hi
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", dedupTable, err)
	}
	return parts, nil
}

// querier is what listPartitions needs: a pool, a connection or a tx.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// session is maintenance's connection with the limits of the current
// pass. Every transaction it begins carries them to the server as
// statement_timeout (the time left in the pass) and lock_timeout: the
// server, not the client, ends a statement that runs out of time, so the
// connection stays usable and the pass can roll back, which releases the
// maintenance lock. (When the client gives up first, pgx closes the
// connection, and a backend blocked on a lock would not notice until the
// lock came, holding the maintenance lock until then.)
type session struct {
	conn        *pgx.Conn
	deadline    time.Time     // end of the pass
	lockTimeout time.Duration // longest wait for one table lock
}

// errMaintenanceBusy: another process's maintenance transaction holds the
// lock.
var errMaintenanceBusy = errors.New("another process is maintaining processed_event")

// errPartitionGone: the partition to drop was dropped since it was listed.
var errPartitionGone = errors.New("partition already dropped")

// errPassTimeout marks a pass that ran out of time.
var errPassTimeout = fmt.Errorf("pass timed out: %w", context.DeadlineExceeded)

// begin starts a transaction bounded by the rest of the pass and by
// lockTimeout, holding the maintenance lock (errMaintenanceBusy when another
// process holds it). Maintenance takes strong locks that inserts into
// processed_event would queue behind; it gives up rather than stall billing.
// The lock is transaction-scoped: a session lock would stay on whichever
// server session a pooler in transaction mode lent for the statement.
func (s session) begin(ctx context.Context) (pgx.Tx, error) {
	left := time.Until(s.deadline)
	if left <= 0 {
		return nil, errPassTimeout
	}
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	if _, err := tx.Exec(ctx, stmts.dedupLimits, pgMillis(left), pgMillis(min(left, s.lockTimeout))); err != nil {
		rollback(ctx, tx)
		return nil, fmt.Errorf("set timeouts: %w", err)
	}
	var locked bool
	if err := tx.QueryRow(ctx, stmts.dedupTryLock, dedupLockKey).Scan(&locked); err != nil {
		rollback(ctx, tx)
		return nil, fmt.Errorf("lock: %w", err)
	}
	if !locked {
		rollback(ctx, tx)
		return nil, errMaintenanceBusy
	}
	return tx, nil
}

// pgMillis formats d as a Postgres duration setting, at least 1ms (0 would
// mean no limit).
func pgMillis(d time.Duration) string { return fmt.Sprintf("%dms", max(d.Milliseconds(), 1)) }

// createPartition attaches p, first moving into it the rows of the DEFAULT
// partition that fall in its range: Postgres refuses to attach a range
// while DEFAULT holds rows of it. All in one transaction:
//
//  1. lock DEFAULT (ACCESS EXCLUSIVE, which ATTACH takes anyway): no row
//     can reach it between the move and the attach;
//  2. create p as a plain table shaped like processed_event;
//  3. move the rows (DELETE … RETURNING into p);
//  4. ATTACH p, which takes only SHARE UPDATE EXCLUSIVE on processed_event,
//     so inserts into the other partitions go on (CREATE TABLE … PARTITION
//     OF would lock the whole table), and builds p's indexes.
//
// An insert into p's range that was routed to DEFAULT before the commit and
// waited for the lock fails with SQLSTATE 23514 on processed_event_default;
// Store.Reserve runs its transaction again in place (the row now
// goes to p), or reports it as transient. moved is the number of rows moved;
// created is false when, under the lock, a partition covering p's range
// already exists (another process made it since the pass listed them).
func createPartition(ctx context.Context, s session, p partition) (moved int64, created bool, err error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer rollback(ctx, tx) // a no-op once committed
	parts, err := listPartitions(ctx, tx)
	if err != nil {
		return 0, false, err
	}
	if slices.ContainsFunc(parts, func(q partition) bool { return q.overlaps(p.lo, p.hi) }) {
		return 0, false, nil
	}
	hasDefault := slices.ContainsFunc(parts, func(q partition) bool { return q.isDefault })
	named := map[string]string{"partition": p.name}
	create, err1 := stmts.dedupCreatePartition.Expand(named)
	move, err2 := stmts.dedupMoveRows.Expand(named)
	attach, err3 := stmts.dedupAttachPartition.Expand(map[string]string{"partition": p.name, "lo": p.lo.String(), "hi": p.hi.String()})
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, false, err
	}
	if hasDefault {
		if _, err := tx.Exec(ctx, stmts.dedupLockDefault); err != nil {
			return 0, false, fmt.Errorf("lock %s: %w", defaultPartition, err)
		}
	}
	if _, err := tx.Exec(ctx, create); err != nil {
		return 0, false, fmt.Errorf("create %s: %w", p.name, err)
	}
	if hasDefault {
		tag, err := tx.Exec(ctx, move, pgtype.UUID{Bytes: p.lo, Valid: true}, pgtype.UUID{Bytes: p.hi, Valid: true})
		if err != nil {
			return 0, false, fmt.Errorf("move rows of %s out of %s: %w", p.name, defaultPartition, err)
		}
		moved = tag.RowsAffected()
	}
	if _, err := tx.Exec(ctx, attach); err != nil {
		return 0, false, fmt.Errorf("attach %s: %w", p.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("commit: %w", err)
	}
	return moved, true, nil
}

// dropPartition drops p unless one of its rows was processed at or after
// cutoff (an old event replayed recently: docs/interface.md §7 keeps every row
// for the retention from when it was written), and returns how many rows it
// dropped. It locks p first, so the count is exact and no row can arrive
// between the check and the drop; DROP then takes ACCESS EXCLUSIVE on
// processed_event for a moment, bounded by the lock timeout.
func dropPartition(ctx context.Context, s session, p partition, cutoff time.Time) (bool, int64, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return false, 0, err
	}
	defer rollback(ctx, tx) // a no-op once committed
	named := map[string]string{"partition": p.name}
	lock, err1 := stmts.dedupLockPartition.Expand(named)
	count, err2 := stmts.dedupCountPartition.Expand(named)
	drop, err3 := stmts.dedupDropPartition.Expand(named)
	if err := errors.Join(err1, err2, err3); err != nil {
		return false, 0, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, stmts.dedupPartitionExists, pgx.Identifier{p.name}.Sanitize()).Scan(&exists); err != nil {
		return false, 0, fmt.Errorf("look up %s: %w", p.name, err)
	}
	if !exists {
		return false, 0, errPartitionGone
	}
	if _, err := tx.Exec(ctx, lock); err != nil {
		return false, 0, fmt.Errorf("lock %s: %w", p.name, err)
	}
	var (
		rows   int64
		newest pgtype.Timestamptz
	)
	if err := tx.QueryRow(ctx, count).Scan(&rows, &newest); err != nil {
		return false, 0, fmt.Errorf("count %s: %w", p.name, err)
	}
	if newest.Valid && !newest.Time.Before(cutoff) {
		return false, 0, nil
	}
	if _, err := tx.Exec(ctx, drop); err != nil {
		return false, 0, fmt.Errorf("drop %s: %w", p.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, 0, fmt.Errorf("commit: %w", err)
	}
	return true, rows, nil
}

// deleteExpiredBatch deletes up to batch rows of the DEFAULT partition
// processed before cutoff, oldest first, in one short transaction of its
// own, and returns how many. The ctids come from the processed_at index in
// order: a scan from the start of the heap would wade through the dead
// tuples of every earlier batch, while index entries of deleted rows are
// marked dead at the first visit and skipped cheaply after.
func deleteExpiredBatch(ctx context.Context, s session, cutoff time.Time, batch int) (int64, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer rollback(ctx, tx) // a no-op once committed
	tag, err := tx.Exec(ctx, stmts.dedupDeleteExpired, cutoff, batch)
	if err != nil {
		return 0, fmt.Errorf("delete expired rows of %s: %w", defaultPartition, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return tag.RowsAffected(), nil
}

// isDefaultPartitionRace reports whether err is the one an insert gets when
// a day partition was attached while it waited to write into DEFAULT.
func isDefaultPartitionRace(err error) bool {
	// AsType, not As: As's target escapes, an allocation for every reserve,
	// whose err is nearly always nil.
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == "23514" && pgErr.TableName == defaultPartition
}
