package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/pgbouncertest"
)

// TestEndToEndThroughPgBouncer is TestEndToEnd with billing reaching
// Postgres only through PgBouncer 1.18 in transaction pool mode, configured
// as deploy/README.md ("Behind PgBouncer") says: default_query_exec_mode=exec
// in the DSN, idle_in_transaction_session_timeout in
// ignore_startup_parameters. migrate (twice, and its lock) and run both go
// through it; the checks read Postgres directly.
func TestEndToEndThroughPgBouncer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := pgbouncertest.Start(t, e.dsn, pgbouncertest.Options{PoolSize: 8})
	e.dsn = b.DSN(t, e.dsn)
	billOnce(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := b.ServerConnections(ctx); err != nil || n == 0 {
		t.Errorf("PgBouncer server connections = %d, %v; want some (billing's work went through it)", n, err)
	}
}
