// Package postgres is billing's Postgres adapter: the connection pool, the
// embedded migrations, Store, which runs billing's transactions
// (order.Ledger: Reserve and Settle, grouped across concurrent events) and
// the pending completer's queries, the upkeep of processed_event's day partitions
// (DedupMaintenance), and the translation of every driver error into order's
// typed errors at this edge (TranslateError).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// defaultConnectTimeout bounds one connection attempt when the DSN does
	// not set connect_timeout.
	defaultConnectTimeout = 5 * time.Second
	// pingTimeout bounds NewPool's first round trip.
	pingTimeout = 10 * time.Second
	// idleInTxTimeout makes the server end a session left idle inside a
	// transaction (a stuck client), releasing its row locks. Billing's
	// transactions are a few statements long and never span a network call.
	idleInTxTimeout = "60s"
)

// NewPool opens a pgx pool of at most maxConns connections (pgx's default
// when maxConns <= 0) and checks it with a ping. Errors never contain the
// DSN's password: a DSN that does not parse is reported without its text.
func NewPool(ctx context.Context, dsn string, maxConns int, opts ...PoolOption) (*pgxpool.Pool, error) {
	pool, err := OpenPool(ctx, dsn, maxConns, opts...)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping: %w", translate(ctx, err))
	}
	return pool, nil
}

// OpenPool is NewPool without the ping: it connects to nothing yet, so a
// process can be built (and serve /healthz) before Postgres answers.
func OpenPool(ctx context.Context, dsn string, maxConns int, opts ...PoolOption) (*pgxpool.Pool, error) {
	var o poolOptions
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx redacts the password on a best-effort basis only, and a
		// wrapped *url.Error quotes the whole URL: report no text.
		return nil, errors.New("postgres: cannot parse the database DSN (details withheld: they may include the password)")
	}
	if maxConns > math.MaxInt32 { // pgx keeps the size in an int32
		return nil, fmt.Errorf("postgres: pool size %d is above %d", maxConns, math.MaxInt32)
	}
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	cfg.MinConns = 0
	cfg.MaxConnLifetime = 30 * time.Minute
	cfg.MaxConnLifetimeJitter = 2 * time.Minute
	cfg.MaxConnIdleTime = 5 * time.Minute
	cfg.HealthCheckPeriod = 15 * time.Second
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "billing"
	}
	// A startup parameter: PgBouncer refuses it unless its
	// ignore_startup_parameters lists it, and then drops it (deploy/README.md,
	// "Behind PgBouncer": set it on the role there).
	if _, ok := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleInTxTimeout
	}
	if o.tp != nil {
		cfg.ConnConfig.Tracer = newQueryTracer(o.tp)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", translate(ctx, err))
	}
	return pool, nil
}
