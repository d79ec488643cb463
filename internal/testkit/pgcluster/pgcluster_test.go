package pgcluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// needServer skips t under -short, and without the server binaries unless
// BILLING_E2E=1, as pgtest does for the tests that start clusters through it.
func needServer(t *testing.T) {
	t.Helper()
	needs.External(t, "a Postgres server")
	if _, err := FindBinDir(); errors.Is(err, ErrUnavailable) {
		needs.Missing(t, err)
	}
}

func TestStartConnectStopRestart(t *testing.T) {
	t.Parallel()
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// t.TempDir is 0700: Start must make it passable for the postgres user.
	dir := filepath.Join(t.TempDir(), "data")
	c, err := Start(ctx, dir, Options{})
	if err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("cleanup Stop() error = %v", err)
		}
	})
	if c.Port() == 0 {
		t.Fatal("Port() = 0, want the chosen port")
	}

	checkServes(ctx, t, c, dir)

	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop() error = %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop() error = %v, want nil (idempotent)", err)
	}
	if conn, err := pgx.Connect(ctx, c.DSN("postgres")); err == nil {
		_ = conn.Close(ctx)
		t.Fatal("connect after Stop succeeded, want an error")
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		t.Fatalf("data dir gone after Stop: %v", err)
	}

	port := c.Port()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("restart: Start() error = %v", err)
	}
	if got := c.Port(); got != port {
		t.Errorf("port after restart = %d, want %d", got, port)
	}
	if err := c.Start(ctx); err == nil {
		t.Error("Start() on a running cluster succeeded, want an error")
	}
	checkServes(ctx, t, c, dir)
}

func TestStartReusesDataDir(t *testing.T) {
	t.Parallel()
	needServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")

	c, err := Start(ctx, dir, Options{})
	if err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE kept"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	_ = conn.Close(ctx)
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop() error = %v", err)
	}

	// A new Cluster on the same directory skips initdb and keeps the data.
	c2, err := Start(ctx, dir, Options{})
	if err != nil {
		t.Fatalf("second Start() error = %v", err)
	}
	defer func() {
		if err := c2.Stop(ctx); err != nil {
			t.Errorf("Stop() error = %v", err)
		}
	}()
	conn, err = pgx.Connect(ctx, c2.DSN("kept"))
	if err != nil {
		t.Fatalf("connect to the database made before the restart: %v", err)
	}
	_ = conn.Close(ctx)
}

func checkServes(ctx context.Context, t *testing.T, c *Cluster, dir string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var (
		dataDir, fsync, addr string
		maxConns             int
	)
	if err := conn.QueryRow(ctx, `SELECT current_setting('data_directory'), current_setting('fsync'),
		current_setting('listen_addresses'), current_setting('max_connections')::int`).Scan(&dataDir, &fsync, &addr, &maxConns); err != nil {
		t.Fatalf("query settings: %v", err)
	}
	want, _ := filepath.EvalSymlinks(dir)
	if got, _ := filepath.EvalSymlinks(dataDir); got != want {
		t.Errorf("data_directory = %q, want %q", dataDir, want)
	}
	if fsync != "off" {
		t.Errorf("fsync = %q, want off", fsync)
	}
	if addr != "127.0.0.1" {
		t.Errorf("listen_addresses = %q, want 127.0.0.1", addr)
	}
	if maxConns != 200 {
		t.Errorf("max_connections = %d, want 200", maxConns)
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	needServer(t)
	dir, err := FindBinDir()
	if err != nil {
		t.Fatalf("FindBinDir() error = %v", err)
	}
	if !hasServer(dir) {
		t.Errorf("FindBinDir() = %q, which lacks initdb or postgres", dir)
	}
}

func TestStartFromInitdbCache(t *testing.T) {
	t.Parallel()
	needServer(t)
	if _, err := cacheDir(); err != nil {
		t.Skipf("no usable cache directory: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 2 {
		var logs syncbuf.Buffer
		c, err := Start(ctx, filepath.Join(t.TempDir(), "data"), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("Start() #%d error = %v", i+1, err)
		}
		checkServes(ctx, t, c, c.Dir())
		if err := c.Stop(ctx); err != nil {
			t.Fatalf("Stop() error = %v", err)
		}
		// The first start filled the cache, if an earlier run had not.
		if i == 1 && !strings.Contains(logs.String(), "copied from the initdb cache") {
			t.Errorf("second start did not use the initdb cache; log:\n%s", logs.String())
		}
	}
}
