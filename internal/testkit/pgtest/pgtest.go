// Package pgtest gives tests a real Postgres: one server per test binary (a
// throwaway cluster, or the server named by BILLING_TEST_DATABASE_URL) and a
// fresh, migrated database per test, cloned from a template database that is
// migrated once per process. Production code does not import it.
//
// Use it from TestMain (which also checks for leaked goroutines):
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// The throwaway cluster is started on the first NewDB, so a run that selects
// no database test starts nothing. With -short (make test-unit) every test
// that asks for a database or a cluster is skipped, and so it is on a machine
// without the server binaries, unless BILLING_E2E=1 (package needs). If the test binary is killed, the
// postmaster dies with it (see pgcluster) but its directory, named
// pgtest-* under /dev/shm or os.TempDir, stays behind; with an external
// server, so may a database named billing_tmpl_* or billing_test_*.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/pgcluster"
)

// EnvDatabaseURL names a superuser DSN of an existing server to use instead
// of a throwaway cluster. Tests create and drop databases on it.
const EnvDatabaseURL = "BILLING_TEST_DATABASE_URL"

const (
	// setupTimeout bounds starting the server, creating or dropping a
	// database.
	setupTimeout = 60 * time.Second
	// dbMaxConns is the pool size of a test database: room for tests that
	// run 20 transactions at once.
	dbMaxConns = 25
)

// server is the process-wide test server. It is a package variable because
// its lifetime is the test binary's: Main creates and tears it down, and
// NewDB, which has only a testing.TB, reaches it from any test.
var server = &state{}

type state struct {
	mu       sync.Mutex
	inMain   bool
	adminDSN string             // superuser DSN to the maintenance database
	external bool               // adminDSN came from EnvDatabaseURL
	dir      string             // the throwaway cluster's directory
	cluster  *pgcluster.Cluster // nil until started, or when external
	admin    *pgxpool.Pool      // to adminDSN, for CREATE/DROP DATABASE
	template string             // migrated template database, "" until made

	createMu sync.Mutex // serialises CREATE DATABASE … TEMPLATE
}

// Main runs the tests with a Postgres for NewDB, tears it down, then fails
// the run if goroutines outlived the tests (goleak, with leakOpts), and
// exits. Call it from TestMain.
func Main(m *testing.M, leakOpts ...goleak.Option) { Exit(Run(m), leakOpts...) }

// Exit ends a TestMain that called [Run] (and stopped what else its tests
// shared) with the run's exit code: 1 instead of 0 if goroutines outlived
// the tests (goleak, with leakOpts).
func Exit(code int, leakOpts ...goleak.Option) {
	if code == 0 {
		if err := goleak.Find(leakOpts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Run is Main without the exit and the leak check, for a TestMain with more
// to do after the tests (e2e removes the binary it built): when it returns, the cluster it started has
// exited and its pools are closed.
func Run(m *testing.M) int {
	server.mu.Lock()
	server.inMain = true
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		server.adminDSN, server.external = dsn, true
	}
	server.mu.Unlock()

	code := m.Run()
	if err := server.teardown(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// testTimeout bounds the database work of one test (Context).
const testTimeout = 30 * time.Second

// Context returns a context for a test's database work: cancelled when t
// and its cleanups have ended, and bounded by testTimeout, so a hung query
// fails the test rather than the whole run. It is not t.Context, which ends
// before the cleanups that may still need the database.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// NewDB returns a pool to a new database holding the migrated schema and
// nothing else, and that database's DSN. Both go away when t ends.
func NewDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	needs.External(t, "a Postgres server")
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	tmpl, err := server.ensureTemplate(ctx)
	if err != nil {
		fatal(t, err)
	}
	return newDB(ctx, t, tmpl)
}

// NewEmptyDB is NewDB without the migrations: a database as CREATE
// DATABASE makes it, for tests of migrating.
func NewEmptyDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	needs.External(t, "a Postgres server")
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return newDB(ctx, t, "template0")
}

// NewCluster starts a private throwaway cluster for a test that stops and
// restarts its own server (outage tests); it is stopped and its directory
// removed when t ends. It needs no Main and ignores EnvDatabaseURL.
func NewCluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	return NewClusterWith(t, pgcluster.Options{})
}

// NewClusterWith is NewCluster with opts, e.g. a durable cluster (Fsync)
// for a test of what a Postgres crash loses.
func NewClusterWith(t testing.TB, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	needs.External(t, "a Postgres server")
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	dir, err := tempDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	c, err := pgcluster.Start(ctx, filepath.Join(dir, "data"), opts)
	if err != nil {
		_ = os.RemoveAll(dir)
		fatal(t, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("pgtest: stop cluster: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("pgtest: remove cluster dir: %v", err)
		}
	})
	return c
}

// NewMigratedCluster is NewCluster with the schema migrated into its
// "postgres" database, and a pool of four connections to that database,
// closed when t ends (before the cluster stops). The database's DSN is
// c.DSN("postgres").
func NewMigratedCluster(t testing.TB) (*pgcluster.Cluster, *pgxpool.Pool) {
	t.Helper()
	return NewMigratedClusterWith(t, pgcluster.Options{})
}

// NewMigratedClusterWith is NewMigratedCluster on NewClusterWith(t, opts).
func NewMigratedClusterWith(t testing.TB, opts pgcluster.Options) (*pgcluster.Cluster, *pgxpool.Pool) {
	t.Helper()
	c := NewClusterWith(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	pool, err := postgres.NewPool(ctx, c.DSN("postgres"), 4)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return c, pool
}

func newDB(ctx context.Context, t testing.TB, template string) (*pgxpool.Pool, string) {
	t.Helper()
	admin, adminDSN, err := server.ensureServer(ctx)
	if err != nil {
		fatal(t, err)
	}
	name := "billing_test_" + randomSuffix()
	if err := server.createDB(ctx, admin, name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := dropDB(ctx, admin, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pool, err := postgres.NewPool(ctx, dsn, dbMaxConns)
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", name, err)
	}
	t.Cleanup(pool.Close) // runs before the drop: cleanups run last-in first-out
	return pool, dsn
}

// fatal ends t for err from starting the server: skipped when the machine
// has no Postgres (unless BILLING_E2E=1), failed otherwise.
func fatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, pgcluster.ErrUnavailable) {
		needs.Missing(t, fmt.Errorf("pgtest: %w", err))
	}
	t.Fatalf("pgtest: %v", err)
}

// ensureServer starts the throwaway cluster unless there is a server, and
// returns the admin pool and its DSN.
func (s *state) ensureServer(ctx context.Context) (*pgxpool.Pool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inMain {
		return nil, "", errors.New("call pgtest.Main(m) from the package's TestMain")
	}
	if s.admin != nil {
		return s.admin, s.adminDSN, nil
	}
	if s.adminDSN == "" {
		dir, err := tempDir()
		if err != nil {
			return nil, "", err
		}
		c, err := pgcluster.Start(ctx, filepath.Join(dir, "data"), pgcluster.Options{})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, "", err
		}
		s.dir, s.cluster, s.adminDSN = dir, c, c.DSN("postgres")
	}
	admin, err := postgres.NewPool(ctx, s.adminDSN, 4)
	if err != nil {
		return nil, "", fmt.Errorf("connect to the test server: %w", err)
	}
	s.admin = admin
	return admin, s.adminDSN, nil
}

// ensureTemplate makes the migrated template database, once per process.
func (s *state) ensureTemplate(ctx context.Context) (string, error) {
	admin, adminDSN, err := s.ensureServer(ctx)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.template != "" {
		return s.template, nil
	}
	name := "billing_tmpl_" + randomSuffix()
	if err := s.createDB(ctx, admin, name, "template0"); err != nil {
		return "", err
	}
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		return "", err
	}
	pool, err := postgres.NewPool(ctx, dsn, postgres.MigratePoolSize)
	if err != nil {
		return "", fmt.Errorf("open template %s: %w", name, err)
	}
	err = postgres.Migrate(ctx, pool)
	pool.Close() // a template must have no sessions when it is copied
	if err != nil {
		_ = dropDB(ctx, admin, name)
		return "", fmt.Errorf("migrate template %s: %w", name, err)
	}
	s.template = name
	return name, nil
}

// createDB creates name as a copy of template. Postgres refuses to copy a
// database that has other sessions ("source database … is being accessed by
// other users", 55006): creations from this process are serialised, and one
// that collides with another process, or with a backend still exiting,
// is retried until ctx ends.
func (s *state) createDB(ctx context.Context, admin *pgxpool.Pool, name, template string) error {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	sql := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize())
	pause := 50 * time.Millisecond
	for {
		_, err := admin.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			if err != nil {
				return fmt.Errorf("create database %s from %s: %w", name, template, err)
			}
			return nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("create database %s from %s: %w (last: %w)", name, template, ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

func dropDB(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// teardown drops the template (which matters on an external server), closes
// the admin pool, stops the throwaway cluster and removes its directory.
func (s *state) teardown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var errs []error
	if s.admin != nil {
		if s.template != "" && s.external {
			errs = append(errs, dropDB(ctx, s.admin, s.template))
		}
		s.admin.Close()
		s.admin, s.template = nil, ""
	}
	if s.cluster != nil {
		errs = append(errs, s.cluster.Stop(ctx))
		s.cluster, s.adminDSN = nil, ""
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
		s.dir = ""
	}
	return errors.Join(errs...)
}

// shmDir is a memory file system, used for test clusters when it has room.
const shmDir = "/dev/shm"

// minShmFree is the free space shmDir needs to be used: a cluster is about
// 40 MB and every test database adds about 8 MB while it lives.
const minShmFree = 1 << 30

// tempDir makes a directory for a cluster: on shmDir when it has room (a
// test creates and drops hundreds of files per database; ext4 spends most of
// a test run's time allocating inodes for them), else under os.TempDir. It
// is 0755, unlike os.MkdirTemp's 0700, so that the postgres OS user can
// reach the data directory inside when the tests run as root.
func tempDir() (string, error) {
	parent := ""
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err == nil && st.Bavail*uint64(st.Bsize) >= minShmFree {
		parent = shmDir
	}
	dir, err := os.MkdirTemp(parent, "pgtest-")
	if err != nil && parent != "" {
		dir, err = os.MkdirTemp("", "pgtest-")
	}
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("temp dir: %w", err)
	}
	return dir, nil
}

// withDatabase returns dsn (a URL or keyword/value string) naming database
// dbname instead.
func withDatabase(dsn, dbname string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("parse " + EnvDatabaseURL + ": not a valid URL")
		}
		u.Path, u.RawPath = "/"+dbname, ""
		return u.String(), nil
	}
	// In keyword/value form a later keyword overrides an earlier one.
	return dsn + " dbname=" + dbname, nil
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
