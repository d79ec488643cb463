package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// refusedPort returns a loopback port that nothing listens on.
func refusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

func TestTranslateError(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)

	// Real errors from pgx, not hand-made look-alikes.
	_, connectErr := pgconn.Connect(ctx, "host=127.0.0.1 user=postgres sslmode=disable connect_timeout=2 port="+strconv.Itoa(refusedPort(t)))
	var ce *pgconn.ConnectError
	if !errors.As(connectErr, &ce) {
		t.Fatalf("connect to a closed port: %v (%T), want a *pgconn.ConnectError", connectErr, connectErr)
	}
	closed, err := pgxpool.New(ctx, "host=127.0.0.1 user=postgres sslmode=disable port="+strconv.Itoa(refusedPort(t)))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	closedPoolErr := closed.Ping(ctx)

	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }
	outage := &order.OutageError{Dependency: "postgres", Err: errors.New("x")}
	transient := &order.TransientError{Op: "postgres", Err: errors.New("x")}
	tests := []struct {
		name string
		err  error
		want order.Class
	}{
		{"connection_exception 08006", pg("08006"), order.ClassOutage},
		{"connection_does_not_exist 08003", pg("08003"), order.ClassOutage},
		{"admin_shutdown 57P01", pg("57P01"), order.ClassOutage},
		{"crash_shutdown 57P02", pg("57P02"), order.ClassOutage},
		{"cannot_connect_now 57P03", pg("57P03"), order.ClassOutage},
		{"too_many_connections 53300", pg("53300"), order.ClassOutage},
		{"disk_full 53100", pg("53100"), order.ClassOutage},
		{"read_only_sql_transaction 25006", pg("25006"), order.ClassOutage},
		{"out_of_memory 53200", pg("53200"), order.ClassOutage},
		{"configuration_limit_exceeded 53400", pg("53400"), order.ClassOutage},
		{"operator_intervention 57000", pg("57000"), order.ClassOutage},
		{"database_dropped 57P04", pg("57P04"), order.ClassOutage},
		{"idle_session_timeout 57P05", pg("57P05"), order.ClassOutage},
		{"system_error 58000", pg("58000"), order.ClassOutage},
		{"io_error 58030", pg("58030"), order.ClassOutage},
		{"internal_error XX000", pg("XX000"), order.ClassOutage},
		{"data_corrupted XX001", pg("XX001"), order.ClassOutage},
		{"index_corrupted XX002", pg("XX002"), order.ClassOutage},
		{"wrapped disk_full", fmt.Errorf("reserve: %w", pg("53100")), order.ClassOutage},
		{"serialization_failure 40001", pg("40001"), order.ClassTransient},
		{"deadlock_detected 40P01", pg("40P01"), order.ClassTransient},
		{"lock_not_available 55P03", pg("55P03"), order.ClassTransient},
		{"query_canceled 57014 (a role's statement_timeout)", pg("57014"), order.ClassOutage},
		{"wrapped serialization_failure", fmt.Errorf("insert: %w", pg("40001")), order.ClassTransient},
		{"unique_violation 23505", pg("23505"), order.ClassPermanent},
		{"check_violation 23514", pg("23514"), order.ClassPermanent},
		{"undefined_table 42P01", pg("42P01"), order.ClassPermanent},
		{"connection refused", connectErr, order.ClassOutage},
		{"wrapped connection refused", fmt.Errorf("begin: %w", connectErr), order.ClassOutage},
		{"net.OpError", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, order.ClassOutage},
		{"io.EOF", io.EOF, order.ClassOutage},
		{"io.ErrUnexpectedEOF", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), order.ClassOutage},
		{"conn closed", fmt.Errorf("exec: %w", pgconn.ErrConnClosed), order.ClassOutage},
		{"closed pool", closedPoolErr, order.ClassOutage},
		{"closed pool sentinel", puddle.ErrClosedPool, order.ClassOutage},
		{"context.Canceled", context.Canceled, order.ClassCanceled},
		{"wrapped context.Canceled", fmt.Errorf("query: %w", context.Canceled), order.ClassCanceled},
		{"context.DeadlineExceeded", context.DeadlineExceeded, order.ClassTransient},
		{"already an outage", outage, order.ClassOutage},
		{"already transient", transient, order.ClassTransient},
		{"anything else", errors.New("something odd"), order.ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := postgres.TranslateError(tt.err)
			if !errors.Is(got, tt.err) {
				t.Errorf("TranslateError(%v) = %v, which does not wrap the original", tt.err, got)
			}
			if c := order.Classify(got); c != tt.want {
				t.Errorf("Classify(TranslateError(%v)) = %v, want %v", tt.err, c, tt.want)
			}
		})
	}
	t.Run("nil", func(t *testing.T) {
		t.Parallel()
		if got := postgres.TranslateError(nil); got != nil {
			t.Errorf("TranslateError(nil) = %v, want nil", got)
		}
	})
	t.Run("typed errors are not wrapped again", func(t *testing.T) {
		t.Parallel()
		if got := postgres.TranslateError(outage); got != outage { //nolint:errorlint // identity is the point: a wrapped outage would pass errors.Is
			t.Errorf("TranslateError(outage) = %v, want the same error", got)
		}
	})
}

func TestNewPoolErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const secret = "s3cretPassw0rd"
	port := strconv.Itoa(refusedPort(t))
	for _, dsn := range []string{
		"postgres://billing:" + secret + "@127.0.0.1:" + port + "/billing?sslmode=disable&connect_timeout=2",
		"host=127.0.0.1 port=" + port + " user=billing password=" + secret + " dbname=billing sslmode=disable connect_timeout=2",
		"postgres://billing:" + secret + "@127.0.0.1:notaport/billing",
		"host=127.0.0.1 port=" + port + " password='" + secret + " sslmode=disable",
		"postgres://billing:" + secret + "@127.0.0.1:" + port + "/billing?sslmode=bogus",
	} {
		pool, err := postgres.NewPool(ctx, dsn, 2)
		if err == nil {
			pool.Close()
			t.Errorf("NewPool(%q) error = nil, want an error", dsn)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v", err), secret) {
			t.Errorf("NewPool error leaks the password: %v", err)
		}
	}
}

func TestOutageWhenNothingListens(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dsn := "postgres://postgres:pw@127.0.0.1:" + strconv.Itoa(refusedPort(t)) + "/billing?sslmode=disable&connect_timeout=2"

	_, err := postgres.NewPool(ctx, dsn, 2)
	if got := order.Classify(err); got != order.ClassOutage {
		t.Errorf("NewPool: Classify(%v) = %v, want outage", err, got)
	}

	// A pool made before the server went away connects lazily.
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := postgres.NewStore(pool)
	_, err = store.Reserve(ctx, pendingInvoice("ord-1", newEventID(t)), group, terms)
	if got := order.Classify(err); got != order.ClassOutage {
		t.Errorf("Reserve: Classify(%v) = %v, want outage", err, got)
	}
	if err := store.Ping(ctx); order.Classify(err) != order.ClassOutage {
		t.Errorf("Ping: Classify(%v) = %v, want outage", err, order.Classify(err))
	}
	if _, err := postgres.Pending(ctx, pool); order.Classify(err) != order.ClassOutage {
		t.Errorf("Pending: Classify(%v) = %v, want outage", err, order.Classify(err))
	}
}

// TestOutageWhenServerStops stops the test's own cluster in the middle of a
// transaction, checks every path reports an outage, then restarts it.
func TestOutageWhenServerStops(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cluster, pool := pgtest.NewMigratedCluster(t)
	store := postgres.NewStore(pool)
	id := newEventID(t)

	err := store.Retry(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2)`,
				pgtype.UUID{Bytes: id, Valid: true}, group); err != nil {
				return err
			}
			if err := cluster.Stop(ctx); err != nil {
				t.Fatalf("stop cluster: %v", err)
			}
			_, err := tx.Exec(ctx, `SELECT 1 FROM invoice WHERE order_id = 'ord-1' FOR UPDATE`)
			return err
		})
	})
	if got := order.Classify(err); got != order.ClassOutage {
		t.Errorf("a transaction across a shutdown: Classify(%v) = %v, want outage", err, got)
	}
	if _, err := store.Reserve(ctx, order.Invoice{OrderID: "ord-2", EventID: newEventID(t), CustomerID: "c", Amount: 1, Currency: "EUR", Status: order.StatusPending}, group, terms); order.Classify(err) != order.ClassOutage {
		t.Errorf("Reserve while down: Classify(%v) = %v, want outage", err, order.Classify(err))
	}
	if _, err := store.Settle(ctx, order.Settlement{OrderID: "ord-1", Key: newEventID(t), Status: order.StatusCharged, ChargeID: "ch"}); order.Classify(err) != order.ClassOutage {
		t.Errorf("Settle while down: Classify(%v) = %v, want outage", err, order.Classify(err))
	}
	if err := store.Ping(ctx); order.Classify(err) != order.ClassOutage {
		t.Errorf("Ping while down: Classify(%v) = %v, want outage", err, order.Classify(err))
	}
	if _, err := store.Invoices(ctx); order.Classify(err) != order.ClassOutage {
		t.Errorf("Invoices while down: Classify(%v) = %v, want outage", err, order.Classify(err))
	}

	if err := cluster.Start(ctx); err != nil {
		t.Fatalf("restart cluster: %v", err)
	}
	// The pool reconnects by itself; the interrupted transaction left nothing.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := store.Ping(pctx); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
	r, err := store.Reserve(ctx, pendingInvoice("ord-1", id), group, terms)
	if err != nil || !r.FirstSeen {
		t.Errorf("Reserve after restart = %+v, %v, want first seen (the interrupted insert rolled back)", r, err)
	}
}

// TestOutageWhenServerHangs: a server that accepts TCP connections and never
// answers. The pool's connect timeout makes it an outage; the caller's
// cancellation stays a cancellation.
func TestOutageWhenServerHangs(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+l.Addr().String()+"/billing?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := postgres.NewStore(pool)
	ctx := testCtx(t)
	_, err = store.Settle(ctx, order.Settlement{OrderID: "ord-1", Key: newEventID(t), Status: order.StatusCharged, ChargeID: "ch"})
	if got := order.Classify(err); got != order.ClassOutage {
		t.Errorf("connect timeout: Settle: Classify(%v) = %v, want outage", err, got)
	}

	if _, err := store.Reserve(ctx, order.Invoice{OrderID: "ord-1", EventID: newEventID(t), CustomerID: "c", Amount: 1, Currency: "EUR", Status: order.StatusPending}, group, terms); order.Classify(err) != order.ClassOutage {
		t.Errorf("connect timeout: Reserve: Classify(%v) = %v, want outage", err, order.Classify(err))
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = store.Reserve(ctx, pendingInvoice("ord-2", newEventID(t)), group, terms)
	if got := order.Classify(err); got != order.ClassCanceled {
		t.Errorf("cancel while connecting: Classify(%v) = %v, want canceled", err, got)
	}
}
