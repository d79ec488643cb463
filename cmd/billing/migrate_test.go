package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// migrateCtx bounds a migrate test: a migrate that waits for ever fails it.
func migrateCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestMigrateWaitsForPostgres: `billing migrate --wait` started while
// Postgres is down waits for it, saying so, and migrates once it is up: a
// pod started during an outage waits in its init container instead of
// crash-looping.
func TestMigrateWaitsForPostgres(t *testing.T) {
	ctx := migrateCtx(t)
	c := pgtest.NewCluster(t)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", c.DSN("postgres"))
	var stdout, stderr syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"migrate", "--wait", "2m"}, &stdout, &stderr) }()
	poll.Until(t, "migrate waiting for postgres", 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("billing migrate --wait 2m returned %v while Postgres was down, want it to wait; stdout %s", err, stdout.String())
		default:
		}
		return strings.Contains(stdout.String(), "waiting for postgres")
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("billing migrate after Postgres came up: %v", err)
	}
	if !strings.Contains(stdout.String(), "schema is current") {
		t.Errorf("stdout = %s, want schema is current", stdout.String())
	}
}

// TestMigrateWaitGivesUp: past --wait, migrate gives up with one line that
// says how long it waited and why, without the password.
func TestMigrateWaitGivesUp(t *testing.T) {
	ctx := migrateCtx(t)
	setValidEnv(t) // BILLING_DATABASE_URL: nothing listens there
	var stdout, stderr syncbuf.Buffer
	start := time.Now()
	err := run(ctx, []string{"migrate", "--wait", "1s"}, &stdout, &stderr)
	if err == nil {
		t.Fatal("billing migrate against a closed port succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "unreachable") || !strings.Contains(msg, "--wait 1s") || strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q: want one line saying Postgres was unreachable for --wait 1s, without the password", msg)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("gave up after %s, want at least the 1s of --wait", waited)
	}
	if !strings.Contains(stdout.String(), "waiting for postgres") {
		t.Errorf("stdout = %s, want the waiting lines", stdout.String())
	}
}

// TestMigrateDoesNotWaitOutBadConfiguration: what waiting cannot fix (here
// a database that does not exist) ends migrate at once, naming the
// variable, and --wait itself is checked.
func TestMigrateDoesNotWaitOutBadConfiguration(t *testing.T) {
	ctx := migrateCtx(t)
	c := pgtest.NewCluster(t)
	setValidEnv(t)
	t.Setenv("BILLING_DATABASE_URL", c.DSN("missing"))
	var stdout, stderr syncbuf.Buffer
	start := time.Now()
	err := run(ctx, []string{"migrate", "--wait", "1m"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "BILLING_DATABASE_URL") {
		t.Errorf("migrate against a missing database: %v, want an error naming BILLING_DATABASE_URL", err)
	}
	if strings.Contains(stdout.String(), "waiting for postgres") {
		t.Errorf("migrate waited for a missing database (after %s): %s", time.Since(start), stdout.String())
	}
	for _, bad := range []string{"-1s", "soon"} {
		if err := run(ctx, []string{"migrate", "--wait", bad}, &stdout, &stderr); err == nil {
			t.Errorf("migrate --wait %s accepted", bad)
		}
	}
}
