package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// schema100 is the last migration of release 1.0.0 (CHANGELOG.md): the
// schema of the databases the probe test upgrades.
const schema100 = "0003_invoice_key_unique_rejected_resume"

// probeLockTimeout bounds how long a probe write may wait for a lock: the
// migrator's lock_timeout, the longest any of its statements queues ahead
// of billing, and a second of slack for the statement that was granted
// just before the probe queued (docs/interface.md §10: never more than 3 s).
const probeLockTimeout = postgres.MigrationLockTimeout + time.Second

// stallReport is how long the report transaction holds invoice open:
// BILLING_TEST_STALL_REPORT (a Go duration; the run held it 40 s),
// else long enough for the migrator to give its locks up several times.
func stallReport(t *testing.T) time.Duration {
	t.Helper()
	if s := os.Getenv("BILLING_TEST_STALL_REPORT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("BILLING_TEST_STALL_REPORT=%q: %v", s, err)
		}
		return d
	}
	return 3*postgres.MigrationLockTimeout + time.Second
}

// The statements of release 1.0.0 (8072a37) that write invoice on the hot
// path, as the probe's writes: an order's invoice opened pending, and one
// settled.
const (
	probeInsert = `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
		VALUES ($1, $2, 'cus-probe', 100, 'EUR', 'pending') ON CONFLICT DO NOTHING`
	probeSettle = `UPDATE invoice SET status = 'charged', charge_id = NULLIF('ch_probe', ''), updated_at = now()
		WHERE order_id = $1 AND event_id = $2 AND status = 'pending'`
)

// stalledWrite is a probe write that waited for a lock: it took longer
// than billing's writes ever take unless they queue behind the migrator.
const stalledWrite = postgres.MigrationLockTimeout / 2

// probe writes invoice over and over until stop is closed, each write in
// a transaction of its own whose lock_timeout is probeLockTimeout, and
// reports how many it made, how many stalled (stalledWrite), the longest
// one, and the first that failed.
func probe(ctx context.Context, t *testing.T, pool *pgxpool.Pool, stop <-chan struct{}) (n, stalled int, longest time.Duration, err error) {
	t.Helper()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return n, stalled, longest, nil
		default:
		}
		order, key := fmt.Sprintf("ord-probe-%d", i), newEventID(t)
		start := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", probeLockTimeout.Milliseconds())); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, probeInsert, order, key); err != nil {
				return fmt.Errorf("insert: %w", err)
			}
			if _, err := tx.Exec(ctx, probeSettle, order, key); err != nil {
				return fmt.Errorf("settle: %w", err)
			}
			return nil
		})
		took := time.Since(start)
		longest = max(longest, took)
		if took >= stalledWrite {
			stalled++
		}
		if err != nil {
			return n, stalled, longest, fmt.Errorf("probe write %d after %v: %w", i, took.Round(time.Millisecond), err)
		}
		n++
	}
}

// TestMigrationsNeverStallBilling: a database at 1.0.0's schema, with
// invoices, is migrated to this release's while a REPEATABLE READ report
// holds invoice open (stallReport). Billing's writes go on meanwhile: a
// probe writing invoice as 1.0.0 does never waits for a lock longer than
// probeLockTimeout (a probe that would fails with lock_not_available), the
// migrator logs that it waits and for whom (the report), and the migrations
// complete once the report has ended. With the migrator of 1.1.0 (no
// lock_timeout) and 0004 as it shipped, the first probe behind 0004's
// queued ACCESS EXCLUSIVE lock waits as long as the report lasts. And the
// migrator stalls billing once for the report, not once per try: after
// giving its locks up it waits for the report to end before it queues
// again.
func TestMigrationsNeverStallBilling(t *testing.T) {
	t.Parallel()
	reportFor := stallReport(t)
	// Longer than testCtx: the report alone may take 40 s.
	ctx, cancel := context.WithTimeout(t.Context(), reportFor+time.Minute)
	defer cancel()
	pool, _ := pgtest.NewEmptyDB(t)
	if err := postgres.MigrateFS(ctx, pool, migrationSet(t, schema100, nil)); err != nil {
		t.Fatalf("migrate to 1.0.0's schema: %v", err)
	}
	for i := range 200 {
		status := "charged"
		if i%10 == 0 {
			status = "pending"
		}
		if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
			VALUES ($1, $2, 'cus', 100, 'EUR', $3)`, fmt.Sprintf("ord-%d", i), newEventID(t), status); err != nil {
			t.Fatal(err)
		}
	}

	report, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = report.Rollback(context.WithoutCancel(ctx)) }()
	var reportPID int32
	if err := report.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM invoice) AS c`).Scan(&reportPID); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	type probed struct {
		n, stalled int
		longest    time.Duration
		err        error
	}
	probes := make(chan probed, 1)
	go func() {
		n, stalled, longest, err := probe(ctx, t, pool, stop)
		probes <- probed{n, stalled, longest, err}
	}()

	var logs syncbuf.Buffer
	migrated := make(chan error, 1)
	start := time.Now()
	go func() {
		migrated <- postgres.Migrate(ctx, pool, postgres.WithMigrateLog(slog.New(slog.NewJSONHandler(&logs, nil))))
	}()
	select {
	case <-time.After(reportFor):
	case err := <-migrated:
		t.Fatalf("Migrate() = %v while the report held invoice, want it waiting", err)
	}
	if err := report.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var merr error
	select {
	case merr = <-migrated:
	case <-time.After(time.Minute):
		t.Fatal("Migrate() did not return within a minute of the report's end")
	}
	took := time.Since(start)
	close(stop)
	p := <-probes
	t.Logf("report held %v; migrations took %v; %d probe writes, %d stalled, the longest %v", reportFor, took.Round(time.Millisecond), p.n, p.stalled, p.longest.Round(time.Millisecond))

	if p.err != nil {
		t.Errorf("a probe write waited for a lock longer than %v: %v", probeLockTimeout, p.err)
	}
	if merr != nil {
		t.Fatalf("Migrate() error = %v", merr)
	}
	if pending, err := postgres.Pending(ctx, pool); err != nil || len(pending) != 0 {
		t.Errorf("Pending() after the migrations = %v, %v, want none", pending, err)
	}
	if p.n < 2 {
		t.Errorf("%d probe writes while the migrations ran, want several", p.n)
	}
	if p.stalled > 1 {
		t.Errorf("%d probe writes waited %v or more for a lock, want at most one: the migrator queued again while the report it gave its locks up for still ran",
			p.stalled, stalledWrite)
	}
	if !strings.Contains(logs.String(), fmt.Sprintf(`"pid":%d`, reportPID)) {
		t.Errorf("the migrator's log does not name the report (pid %d) as what it waited for:\n%s", reportPID, logs.String())
	}
}

// TestMigrateRetriesADeadlock: a migration that Postgres picks as a
// deadlock's victim is tried again once the other transaction has gone on,
// instead of failing `billing migrate` (1.1.0's first run of 0004 beside
// 1.0.0 exited 1 with 40P01).
func TestMigrateRetriesADeadlock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	set := fstest.MapFS{
		"0001_rows.sql": {Data: []byte(`CREATE TABLE row_pair (id int PRIMARY KEY, v int NOT NULL);
			INSERT INTO row_pair VALUES (1, 0), (2, 0);
			CREATE TABLE go_on (ok bool);`)},
		// Locks row 1, waits (not for a lock) until the test says go on,
		// then locks row 2.
		"0002_both.sql": {Data: []byte(`UPDATE row_pair SET v = v + 1 WHERE id = 1;
			DO $$ BEGIN WHILE NOT EXISTS (SELECT FROM go_on) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$;
			UPDATE row_pair SET v = v + 1 WHERE id = 2;`)},
	}
	if err := postgres.MigrateFS(ctx, pool, fstest.MapFS{"0001_rows.sql": set["0001_rows.sql"]}); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.WithoutCancel(ctx)) }()
	// Postgres checks a waiter for a deadlock once, deadlock_timeout after
	// it begins to wait, and the one whose check finds the cycle is the
	// victim. The other transaction waits first and must not be it: its
	// check comes only long after the test.
	var otherPID int
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid(), set_config('deadlock_timeout', '1h', true)`).Scan(&otherPID, new(string)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `UPDATE row_pair SET v = 10 WHERE id = 2`); err != nil {
		t.Fatal(err)
	}

	var logs syncbuf.Buffer
	migrated := make(chan error, 1)
	go func() {
		migrated <- postgres.MigrateFS(ctx, pool, set, postgres.WithMigrateLog(slog.New(slog.NewJSONHandler(&logs, nil))),
			postgres.WithLockRetry(100*time.Millisecond, 100*time.Millisecond),
			// Its deadlock check (deadlock_timeout, 1 s) must come before
			// its lock_timeout, or it gives up without finding the cycle.
			postgres.WithFirstLockTimeout(postgres.MigrationLockTimeout))
	}()
	// The migration holds row 1 once it waits for the word to go on.
	poll.Until(t, "the migration holding row 1", time.Minute, func() bool {
		var holding bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event = 'PgSleep' AND query LIKE '%go_on%')`).Scan(&holding)
		return err == nil && holding
	})
	// The other transaction asks for row 1 and waits for the migration...
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, `UPDATE row_pair SET v = 20 WHERE id = 1`)
		otherDone <- err
	}()
	poll.Until(t, "the other transaction waiting for row 1", time.Minute, func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, otherPID).Scan(&waiting)
		return err == nil && waiting
	})
	// ...and the migration, going on, asks for row 2 and closes the cycle:
	// its own check, deadlock_timeout later (well before its lock_timeout),
	// finds it, and it is the victim.
	if _, err := pool.Exec(ctx, `INSERT INTO go_on VALUES (true)`); err != nil {
		t.Fatal(err)
	}
	if err := <-otherDone; err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Fatalf("the other transaction was the deadlock's victim: %v (want the migration to be)", err)
		}
		t.Fatal(err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate() = %v, want the deadlocked migration tried again and applied", err)
	}
	var v1, v2 int
	if err := pool.QueryRow(ctx, `SELECT (SELECT v FROM row_pair WHERE id = 1), (SELECT v FROM row_pair WHERE id = 2)`).Scan(&v1, &v2); err != nil {
		t.Fatal(err)
	}
	if v1 != 21 || v2 != 11 {
		t.Errorf("rows after both = %d, %d, want 21, 11 (each transaction applied once)", v1, v2)
	}
	if !strings.Contains(logs.String(), "40P01") {
		t.Errorf("the migrator's log does not tell of the deadlock:\n%s", logs.String())
	}
}
