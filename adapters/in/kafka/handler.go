package kafka

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
)

// Biller is the part of order.BillingService the handler needs.
type Biller interface {
	Bill(ctx context.Context, evt order.OrderConfirmedEvent) (order.Outcome, error)
}

// TracerName is the instrumentation scope of the handler's spans.
const TracerName = "github.com/acme/billing/adapters/in/kafka"

// OrderConfirmedHandler turns one Kafka record into one billing call. The
// billing service does reserve, charge and settle (docs/design.md); the handler
// decodes the raw bytes (a bad record is a *order.ValidationError, sent to
// the DLQ by the consumer) and records the handling as a consumer span, the
// child of the record's traceparent, so that the gateway call and the
// Postgres statements under it join the producer's trace.
type OrderConfirmedHandler struct {
	billing         Biller
	defaultCurrency string
	tracer          trace.Tracer // nil: no spans
}

// HandlerOption configures an OrderConfirmedHandler.
type HandlerOption func(*OrderConfirmedHandler)

// WithTracerProvider makes the handler record a span per handled record
// through tp. Without it, or with a nil tp, it records none, and costs
// nothing but passing the record's trace context on to the calls made for it.
func WithTracerProvider(tp trace.TracerProvider) HandlerOption {
	return func(h *OrderConfirmedHandler) {
		if tp != nil {
			h.tracer = tp.Tracer(TracerName)
		}
	}
}

// NewOrderConfirmedHandler returns a handler billing through b; events
// without a currency are billed in defaultCurrency.
func NewOrderConfirmedHandler(b Biller, defaultCurrency string, opts ...HandlerOption) *OrderConfirmedHandler {
	h := &OrderConfirmedHandler{billing: b, defaultCurrency: defaultCurrency}
	for _, opt := range opts {
		opt(h)
	}
	return h
}

// Handle decodes msg and bills it with the record's W3C trace context in
// ctx, inside a consumer span whose parent is the record's traceparent (a new
// trace when it has no valid one) when tracing is on. Each call is one span:
// a record handled again after an outage gets one per attempt.
func (h *OrderConfirmedHandler) Handle(ctx context.Context, msg Record) (order.Outcome, error) {
	// W3C Trace Context, as docs/interface.md §3 names it: not configurable.
	ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier(msg.Headers))
	if h.tracer == nil {
		return h.handle(ctx, msg, nil)
	}
	ctx, span := h.tracer.Start(ctx, "process "+msg.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKafka,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
			semconv.MessagingDestinationName(msg.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(msg.Partition)),
			semconv.MessagingKafkaOffset(int(msg.Offset)),
		))
	defer span.End()
	outcome, err := h.handle(ctx, msg, span)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, order.Classify(err).String())
		return "", err
	}
	span.SetAttributes(attribute.String("billing.outcome", string(outcome)))
	return outcome, nil
}

// handle decodes and bills msg; span, when not nil, gets the event's ids.
func (h *OrderConfirmedHandler) handle(ctx context.Context, msg Record, span trace.Span) (order.Outcome, error) {
	evt, err := wire.Decode(msg.Value, h.defaultCurrency)
	if err != nil {
		return "", err
	}
	msg.noteEventTime(evt.OccurredAt)
	if span != nil {
		span.SetAttributes(attribute.String("billing.event_id", evt.EventID.String()), attribute.String("billing.order_id", evt.OrderID))
	}
	return h.billing.Bill(ctx, evt)
}

// RecordTrace is the W3C trace context a record carries in its headers.
type RecordTrace struct{ trace.SpanContext }

// TraceIDString returns the trace id as 32 lower-case hex digits, the form
// log lines and tracing back ends search for.
func (t RecordTrace) TraceIDString() string { return t.TraceID().String() }

// TraceParent returns the record's W3C trace context, when it has a valid
// one. The handler's span for the record belongs to the same trace.
func TraceParent(msg Record) (RecordTrace, bool) {
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headerCarrier(msg.Headers)))
	return RecordTrace{sc}, sc.IsValid()
}

// headerCarrier reads a record's headers for the propagator. Only Get is
// used on incoming records.
type headerCarrier []Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

// Get returns the value of the last header named key, as Record.Header does.
func (c headerCarrier) Get(key string) string {
	v, _ := headerOf(c, key)
	return v
}

// Set is not used: the handler writes no headers.
func (c headerCarrier) Set(string, string) {}

// Keys returns the header names.
func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c))
	for i, h := range c {
		keys[i] = h.Key
	}
	return keys
}
