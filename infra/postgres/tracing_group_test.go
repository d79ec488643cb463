package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// A grouped statement's span lies in the trace of its group's first event
// and links to the spans of the others, with the group's size: every
// event's trace leads to the statement that did its database work.
func TestGroupedStatementSpanLinksItsEvents(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) })
	_, dsn := pgtest.NewDB(t)
	pool, err := postgres.NewPool(ctx, dsn, 4, postgres.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := postgres.NewStore(pool, postgres.WithGroups(1))

	// The first reserve waits on a table lock at the server, its group of
	// one holding the store's only runner, while the next three queue and
	// then go as one group.
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE invoice IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	tracer := tp.Tracer("test")
	var wg sync.WaitGroup
	parents := make([]trace.SpanContext, 4)
	reserve := func(i int) {
		pctx, span := tracer.Start(ctx, "event")
		parents[i] = span.SpanContext()
		wg.Go(func() {
			defer span.End()
			if _, err := store.Reserve(pctx, pendingInvoice("ord-"+string(rune('a'+i)), newEventID(t)), group, terms); err != nil {
				t.Errorf("Reserve %d: %v", i, err)
			}
		})
	}
	reserve(0)
	waitLocked(ctx, t, pool)
	for i := 1; i < 4; i++ {
		reserve(i)
	}
	poll.Until(t, "three reserves queued", 10*time.Second, func() bool { return store.QueuedReserves() == 3 })
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	var grouped []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if string(a.Key) == "billing.db.group_events" && a.Value.AsInt64() == 3 {
				grouped = append(grouped, s)
			}
		}
	}
	if len(grouped) != 1 {
		t.Fatalf("%d spans of a group of 3, want 1", len(grouped))
	}
	g := grouped[0]
	// Named after the step, plural: one statement reserved several
	// invoices. The first reserve, alone, has the singular name.
	if g.Name != "reserve invoices" {
		t.Errorf("the group's span is named %q, want reserve invoices", g.Name)
	}
	var alone int
	for _, s := range exp.GetSpans() {
		if s.Name == "reserve invoice" && s.Parent.SpanID() == parents[0].SpanID() {
			alone++
		}
	}
	if alone != 1 {
		t.Errorf("%d spans named reserve invoice under the first event, want 1 (its reserve went alone)", alone)
	}
	linked := map[trace.SpanID]bool{g.Parent.SpanID(): true}
	for _, l := range g.Links {
		linked[l.SpanContext.SpanID()] = true
	}
	for i := 1; i < 4; i++ {
		if !linked[parents[i].SpanID()] {
			t.Errorf("the group's span (parent %s, links %v) leads not to event %d's span %s", g.Parent.SpanID(), g.Links, i, parents[i].SpanID())
		}
	}
}

// waitLocked waits until a session of pool waits for a lock at the server.
func waitLocked(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	poll.Until(t, "a session waiting for a lock", 10*time.Second, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	})
}
