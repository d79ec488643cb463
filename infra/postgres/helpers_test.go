package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

const group = "billing-test"

// testCtx is pgtest.Context, under the name this package's tests use.
var testCtx = pgtest.Context

// terms are the service's attempt terms at the configuration's defaults.
var terms = order.NewAttemptTerms(10*time.Second, 24*time.Hour)

// ended are attempt terms whose attempts have ended by the next call: the
// reserve of an event whose request is long over (answered, or its pod
// gone), leaving its invoice pending for the next path to take.
var ended = order.AttemptTerms{Life: time.Microsecond}

func newEventID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatalf("new event id: %v", err)
	}
	return id
}

// newEventIDs returns n fresh UUIDv7 event ids.
func newEventIDs(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = newEventID(t)
	}
	return ids
}

// tryInsert reserves event id for group, for an order of its own, the way
// the service does (Store.Reserve), and reports whether its dedup row was
// new.
func tryInsert(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id uuid.UUID, group string) bool {
	t.Helper()
	r, err := postgres.NewStore(pool).Reserve(ctx, pendingInvoice("ord-"+id.String(), id), group, terms)
	if err != nil {
		t.Fatalf("Reserve(%s, %q) error = %v", id, group, err)
	}
	return r.FirstSeen
}
