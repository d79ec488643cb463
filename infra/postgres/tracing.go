package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the Postgres spans.
const TracerName = "github.com/acme/billing/infra/postgres"

// PoolOption configures NewPool.
type PoolOption func(*poolOptions)

type poolOptions struct {
	tp trace.TracerProvider
}

// WithTracerProvider records each statement and each batch sent through the
// pool as a client span of tp, when the caller's context already holds a
// span (a record being handled): the probes and the dedup maintenance,
// which run outside any record, would otherwise start a trace of their own
// every few seconds. A nil tp records nothing, as without the option.
func WithTracerProvider(tp trace.TracerProvider) PoolOption {
	return func(o *poolOptions) { o.tp = tp }
}

// queryTracer is a pgx.QueryTracer and pgx.BatchTracer. A span carries the
// statement text (db.query.text, formerly db.statement) but never its
// arguments, which are order data, nor anything of the DSN beyond the
// database name, host and port.
type queryTracer struct {
	tracer trace.Tracer
}

var (
	_ pgx.QueryTracer = queryTracer{}
	_ pgx.BatchTracer = queryTracer{}
)

func newQueryTracer(tp trace.TracerProvider) queryTracer {
	return queryTracer{tracer: tp.Tracer(TracerName)}
}

// attrGroupEvents is the span attribute of a grouped statement: how many
// events it did the work of.
const attrGroupEvents = "billing.db.group_events"

// groupKey carries a group's facts into the context its statements run
// under. That context descends from the group's first event, so the
// statement's span lands in that event's trace; it links to the spans of
// the group's other events, so each of their traces can find the
// statement that did its database work.
type groupKey struct{}

type groupSpan struct {
	events int
	links  []trace.Link
}

// withGroup returns ctx marked as the context of a group of as many events
// as ctxs, the other events' contexts being ctxs[1:].
func withGroup(ctx context.Context, ctxs []context.Context) context.Context {
	g := groupSpan{events: len(ctxs)}
	for _, c := range ctxs[1:] {
		if sc := trace.SpanContextFromContext(c); sc.IsValid() {
			g.links = append(g.links, trace.Link{SpanContext: sc})
		}
	}
	return context.WithValue(ctx, groupKey{}, g)
}

// spanKey marks a context whose span this tracer started, so that the End
// calls never end the caller's span when Start started none.
type spanKey struct{}

func (t queryTracer) start(ctx context.Context, conn *pgx.Conn, name string, attrs ...attribute.KeyValue) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	cfg := conn.Config()
	attrs = append(attrs,
		semconv.DBSystemNamePostgreSQL,
		semconv.DBNamespace(cfg.Database),
		semconv.ServerAddress(cfg.Host),
		semconv.ServerPort(int(cfg.Port)),
	)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	if g, ok := ctx.Value(groupKey{}).(groupSpan); ok {
		attrs = append(attrs, attribute.Int(attrGroupEvents, g.events))
		opts = append(opts, trace.WithLinks(g.links...))
	}
	ctx, span := t.tracer.Start(ctx, name, append(opts, trace.WithAttributes(attrs...))...)
	return context.WithValue(ctx, spanKey{}, span)
}

func end(ctx context.Context, err error) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// TraceQueryStart starts the span of one statement, named after its first
// keyword (SELECT, UPDATE, BEGIN…): a name of few values, as the semantic
// conventions ask.
func (t queryTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op := operation(data.SQL)
	return t.start(ctx, conn, op, semconv.DBOperationName(op), semconv.DBQueryText(data.SQL))
}

// TraceQueryEnd ends the statement's span.
func (queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err)
}

// TraceBatchStart starts the span of a batch (one pipeline, one round trip):
// its statements are its query text, separated by ";\n". A batch that is a
// billing step is named after it, and so is its db.query.summary (the
// semantic conventions name a database span after the summary): "reserve
// invoice" and "settle invoice" for one event's, "reserve invoices" and
// "settle invoices" for a group's, so that a record's trace reads as its
// steps. Any other batch is "BATCH".
func (t queryTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx // not even the statement texts are joined
	}
	texts := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		texts[i] = q.SQL
	}
	attrs := []attribute.KeyValue{
		semconv.DBOperationName("BATCH"),
		semconv.DBOperationBatchSize(len(texts)),
		semconv.DBQueryText(strings.Join(texts, ";\n")),
	}
	name := "BATCH"
	if step := batchStep(texts); step != "" {
		name = step + " invoice"
		if g, ok := ctx.Value(groupKey{}).(groupSpan); ok && g.events > 1 {
			name += "s"
		}
		attrs = append(attrs, semconv.DBQuerySummary(name))
	}
	return t.start(ctx, conn, name, attrs...)
}

// batchStep returns the billing step whose statements texts hold, "reserve"
// or "settle" (Store's pipelines, alone or grouped), or "".
func batchStep(texts []string) string {
	for _, q := range texts {
		switch q {
		case stmts.reserveOne, stmts.reserveGroup:
			return "reserve"
		case stmts.settleOne, stmts.settleGroup:
			return "settle"
		}
	}
	return ""
}

// TraceBatchQuery marks a failed statement of the batch on its span; the
// batch's first failure also ends it with an error (TraceBatchEnd).
func (queryTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.Err == nil {
		return
	}
	if span, ok := ctx.Value(spanKey{}).(trace.Span); ok {
		span.AddEvent("statement failed", trace.WithAttributes(semconv.DBOperationName(operation(data.SQL))))
	}
}

// TraceBatchEnd ends the batch's span.
func (queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// operation returns the first word of a statement in upper case, or "SQL"
// when it does not start with a keyword (a comment, say).
func operation(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "SQL"
	}
	w := strings.ToUpper(strings.TrimRight(f[0], ";("))
	if w == "" || w[0] < 'A' || w[0] > 'Z' {
		return "SQL"
	}
	return w
}
