package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
)

// Headers added to retry and DLQ records (docs/interface.md §5).
const (
	HeaderOriginalTopic     = "x-original-topic"
	HeaderOriginalPartition = "x-original-partition"
	HeaderOriginalOffset    = "x-original-offset"
	HeaderAttempt           = "x-attempt"
	HeaderNotBefore         = "x-not-before"
	HeaderErrorClass        = "x-error-class"
	HeaderError             = "x-error"
	HeaderFailedAt          = "x-failed-at"
	HeaderConsumerGroup     = "x-consumer-group"
	HeaderValueOmitted      = "x-value-omitted"
)

// HeaderReplayedAt marks a record written back to the main topic by
// `billing dlq replay` (RFC 3339, the replay's time). It is not a routing
// header: a replayed record routed to a tier keeps it, so the event is
// counted as replayed wherever its outcome is final (Consumer.final). On
// the main topic it is, like every x-* header there, written by someone
// else: it only decides which metric observes the event (docs/interface.md §5).
const HeaderReplayedAt = "x-replayed-at"

// RoutingHeaders are the headers routing adds; a replay drops them so the
// record goes back as it was first published.
var RoutingHeaders = []string{
	HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderAttempt,
	HeaderNotBefore, HeaderErrorClass, HeaderError, HeaderFailedAt, HeaderConsumerGroup, HeaderValueOmitted,
}

// maxErrorHeader bounds x-error (1 KiB).
const maxErrorHeader = 1024

// Writer writes records and returns once they are acknowledged. A write the
// broker refused for good is an error that is ErrRefused (errors.Is). The
// production one is a ClientWriter over infra/kafka's writer (RequireAll).
type Writer interface {
	WriteRecords(ctx context.Context, recs ...Record) error
}

// Routes names where failed events go, and the policy that says which
// destination and when.
type Routes struct {
	Group       string   // written as x-consumer-group
	RetryTopics []string // tier N is RetryTopics[N-1], one per Policy.TierDelays
	DLQTopic    string
	// Policy decides what happens to a failure (the consumers ask it), and
	// when: the tiers, the waits of outages and of busy invoices.
	Policy order.RetryPolicy
}

// Router copies failed records to the next retry tier or to the DLQ and
// returns only once the write is acknowledged, retrying failed writes: the
// caller commits the source offset only after that.
type Router struct {
	w      Writer
	routes Routes
	now    func() time.Time
	log    *slog.Logger
	m      *metrics.Router
	pause  *health.Pause
}

// NewRouter returns a Router writing through w. pause is told when writes
// fail (Kafka unreachable) and when they succeed again; it may be nil.
func NewRouter(w Writer, routes Routes, m *metrics.Router, pause *health.Pause, log *slog.Logger) *Router {
	// Every result of every destination is exported from the first scrape.
	for _, topic := range append(slices.Clone(routes.RetryTopics), routes.DLQTopic) {
		for _, result := range []string{"ok", "error", ResultRefused} {
			m.RoutedWrites.WithLabelValues(topic, result)
		}
	}
	return &Router{w: w, routes: routes, now: time.Now, log: log, m: m, pause: pause}
}

// Route sends msg, which failed on tier (0 = the main topic) with cause, to
// the destination d names (the policy's decision for cause: a retry tier, or
// else the DLQ) and returns the outcome to count. It returns an error only
// when ctx ended before a write was acknowledged.
func (r *Router) Route(ctx context.Context, msg Record, tier int, d order.Decision, cause error) (order.Outcome, error) {
	return r.route(ctx, ctx, msg, tier, d, cause)
}

// route is Route for an event of a consumer: while the destination refuses
// even the record's stub, the event is held for that outage, and gives way
// (an error) when stop ends, as any held event does at a rebalance.
func (r *Router) route(ctx, stop context.Context, msg Record, tier int, d order.Decision, cause error) (order.Outcome, error) {
	now := r.now().UTC()
	class := d.Class
	out := Record{
		Key:     msg.Key,
		Value:   msg.Value,
		Headers: routedHeaders(msg, tier, r.routes.Group, class, cause, now),
	}
	outcome := order.OutcomeDeadLettered
	attempt := tier
	if d.Action == order.ActionRetryTier {
		outcome = order.OutcomeRetried
		attempt = d.Tier
		out.Topic = r.routes.RetryTopics[d.Tier-1]
		out.Headers = append(out.Headers, Header{
			Key: HeaderNotBefore, Value: []byte(now.Add(d.Delay).Format(time.RFC3339Nano)),
		})
	} else {
		out.Topic = r.routes.DLQTopic
	}
	out.Headers = append(out.Headers, Header{Key: HeaderAttempt, Value: []byte(strconv.Itoa(attempt))})
	switch {
	case msg.HeadersDropped > 0:
		// Its headers were never decoded (a header flood): a copy would not
		// be the original, so it goes as the stub a refused record becomes,
		// naming where the original is.
		out.Value = []byte{}
		out.Headers = append(out.Headers, Header{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(msg.Value)))})
	case msg.BatchOmitted != "":
		// Nothing of it was decoded (its batch is over the bound): a stub
		// of unknown size, naming where it is; x-error names the batch.
		out.Value = []byte{}
		out.Headers = append(out.Headers, Header{Key: HeaderValueOmitted, Value: []byte(ValueOmittedUnknown)})
	}

	res, err := r.deliver(ctx, stop, out)
	if err != nil {
		return "", err
	}
	attrs := []slog.Attr{
		slog.String("to", out.Topic), slog.String("class", class.String()), slog.Int("attempt", attempt),
		slog.String("topic", msg.Topic), slog.Int("partition", msg.Partition), slog.Int64("offset", msg.Offset),
		slog.String("error", oneLine(cause.Error())),
	}
	if res == stubbed {
		attrs = append(attrs, slog.Int("value_omitted", len(out.Value)))
	}
	if tp, ok := TraceParent(msg); ok {
		attrs = append(attrs, slog.String("trace_id", tp.TraceIDString()))
	}
	r.log.LogAttrs(ctx, slog.LevelWarn, "event routed", attrs...)
	return outcome, nil
}

// routeResult is how deliver ended.
type routeResult int

const (
	whole   routeResult = iota // written as it is
	stubbed                    // written without its value (x-value-omitted)
)

// errStubRefused is a routed write refused for good even without its
// value: the destination takes nothing from this service.
var errStubRefused = errors.New("routed write refused even without its value")

// deliver writes msg and returns once a write is acknowledged, and how. A
// write the broker refuses for good (see refused) is retried once alone,
// since a batch refused for one oversized record fails its neighbours too;
// refused alone, it is written as an x-value-omitted stub (docs/interface.md §5).
//
// A stub refused too means that the destination takes nothing from this
// service (not authorised, a topic that is gone): a fault of the service,
// not of the record (docs/interface.md §4), so the record must neither block its
// partition as if it were bad nor be given up (its offset would then be
// committed and the record be nowhere). The event is held for a Kafka
// outage, which pauses consumption, and the whole sequence is tried again
// after the policy's outage wait, until a write is acknowledged; it gives
// way (an error) when stop ends, and ctx ends the writes themselves.
func (r *Router) deliver(ctx, stop context.Context, msg Record) (routeResult, error) {
	held := r.pause.Hold()
	defer held.Leave()
	for attempt := 0; ; attempt++ {
		res, err := r.deliverOnce(ctx, msg)
		if !errors.Is(err, errStubRefused) {
			if err == nil && attempt > 0 && r.pause != nil {
				r.pause.Resume(order.DependencyKafka) // the destination takes writes again
			}
			return res, err
		}
		if attempt == 0 {
			orig := func(k string) slog.Attr { v, _ := headerOf(msg.Headers, k); return HeaderValueAttr(k, v) }
			r.log.LogAttrs(ctx, slog.LevelError, "routed write refused even without its value; "+
				"consumption pauses until the destination takes it",
				slog.String("to", msg.Topic), orig(HeaderOriginalTopic), orig(HeaderOriginalPartition),
				orig(HeaderOriginalOffset), slog.String("error", err.Error()))
		}
		delay := r.routes.Policy.Outage.Delay(attempt)
		if r.pause == nil {
			err = sleep(stop, delay)
		} else {
			held.Meet(order.DependencyKafka, err)
			err = held.HoldOff(stop, order.DependencyKafka, delay)
		}
		if err != nil {
			return 0, fmt.Errorf("write to %s: %w", msg.Topic, err)
		}
	}
}

// deliverOnce is one pass of deliver: the record, alone, then its stub. It
// returns errStubRefused when the stub is refused too, and another error
// only when ctx ended.
func (r *Router) deliverOnce(ctx context.Context, msg Record) (routeResult, error) {
	err := r.write(ctx, msg, r.w.WriteRecords)
	if err == nil || !refused(err) {
		return whole, err
	}
	err = r.write(ctx, msg, r.alone)
	if err == nil || !refused(err) {
		return whole, err
	}
	r.m.RoutedWrites.WithLabelValues(msg.Topic, ResultRefused).Inc()
	r.log.LogAttrs(ctx, slog.LevelWarn, "routed write refused for good, writing it without its value",
		slog.String("to", msg.Topic), slog.Int("value_bytes", len(msg.Value)), slog.String("error", err.Error()))

	stub := msg
	stub.Value = []byte{}
	stub.Headers = append(slices.Clip(msg.Headers),
		Header{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(msg.Value)))})
	err = r.write(ctx, stub, r.alone)
	if err == nil || !refused(err) {
		return stubbed, err
	}
	r.m.RoutedWrites.WithLabelValues(msg.Topic, ResultRefused).Inc()
	return 0, fmt.Errorf("%w: %w", errStubRefused, err)
}

// alone writes msg in a batch of its own when the Writer can (a
// ClientWriter over infra/kafka's writer can), so that a refusal is about
// msg and nothing else.
func (r *Router) alone(ctx context.Context, msgs ...Record) error {
	if s, ok := r.w.(interface {
		WriteAlone(ctx context.Context, rec Record) error
	}); ok && len(msgs) == 1 {
		return s.WriteAlone(ctx, msgs[0])
	}
	return r.w.WriteRecords(ctx, msgs...)
}

// write retries a retriable failure until the write is acknowledged or ctx
// ends, and returns at once an error the broker will repeat (refused).
// Retried failures are counted as result "error" and spaced by writeDelay;
// writeOutageAfter in a row mean Kafka is unreachable for writes, which
// pauses consumption.
func (r *Router) write(ctx context.Context, msg Record, write func(context.Context, ...Record) error) error {
	held := r.pause.Hold() // the Kafka outage this write met, if any
	defer held.Leave()
	for attempt := 0; ; attempt++ {
		err := write(ctx, msg)
		if err == nil {
			r.m.RoutedWrites.WithLabelValues(msg.Topic, "ok").Inc()
			if attempt > 0 && r.pause != nil {
				r.pause.Resume(order.DependencyKafka)
			}
			return nil
		}
		if ctx.Err() != nil {
			r.m.RoutedWrites.WithLabelValues(msg.Topic, "error").Inc()
			return fmt.Errorf("write to %s: %w", msg.Topic, errors.Join(ctx.Err(), err))
		}
		if refused(err) {
			return fmt.Errorf("write to %s: %w", msg.Topic, err)
		}
		r.m.RoutedWrites.WithLabelValues(msg.Topic, "error").Inc()
		r.log.LogAttrs(ctx, slog.LevelError, "routed write failed, retrying",
			slog.String("to", msg.Topic), slog.Int("attempt", attempt+1), slog.String("error", err.Error()))
		wait := sleep
		if attempt+1 >= writeOutageAfter && r.pause != nil {
			held.Meet(order.DependencyKafka, err)
			wait = func(ctx context.Context, d time.Duration) error {
				return held.HoldOff(ctx, order.DependencyKafka, d)
			}
		}
		if err := wait(ctx, writeDelay(attempt)); err != nil {
			return fmt.Errorf("write to %s: %w", msg.Topic, err)
		}
	}
}

// ResultRefused is the result label of billing_routed_writes_total for a
// write the broker refused for good.
const ResultRefused = "refused"

// refused reports whether err is a write the broker refused for good.
func refused(err error) bool { return errors.Is(err, ErrRefused) }

// routedHeaders keeps the record's own headers and sets the routing
// headers anew. x-original-* (and x-value-omitted) are kept from the first
// failure on, so only on a record read from a tier: on the main topic every
// routing header was written by someone else and is replaced, never
// trusted (docs/interface.md §5).
func routedHeaders(msg Record, tier int, group string, class order.Class, cause error, now time.Time) []Header {
	var out []Header
	orig := map[string][]byte{}
	var omitted *Header
	for _, h := range msg.Headers {
		switch {
		case tier > 0 && (h.Key == HeaderOriginalTopic || h.Key == HeaderOriginalPartition || h.Key == HeaderOriginalOffset):
			orig[h.Key] = h.Value
		case tier > 0 && h.Key == HeaderValueOmitted:
			omitted = &h
		case slices.Contains(RoutingHeaders, h.Key):
		default:
			out = append(out, h)
		}
	}
	if len(orig) < 3 {
		orig = map[string][]byte{
			HeaderOriginalTopic:     []byte(msg.Topic),
			HeaderOriginalPartition: []byte(strconv.Itoa(msg.Partition)),
			HeaderOriginalOffset:    []byte(strconv.FormatInt(msg.Offset, 10)),
		}
	}
	if omitted != nil {
		out = append(out, *omitted)
	}
	errClass := "permanent"
	if class == order.ClassTransient {
		errClass = "transient"
	}
	return append(out,
		Header{Key: HeaderOriginalTopic, Value: orig[HeaderOriginalTopic]},
		Header{Key: HeaderOriginalPartition, Value: orig[HeaderOriginalPartition]},
		Header{Key: HeaderOriginalOffset, Value: orig[HeaderOriginalOffset]},
		Header{Key: HeaderErrorClass, Value: []byte(errClass)},
		Header{Key: HeaderError, Value: []byte(truncateUTF8(oneLine(cause.Error()), maxErrorHeader))},
		Header{Key: HeaderFailedAt, Value: []byte(now.Format(time.RFC3339Nano))},
		Header{Key: HeaderConsumerGroup, Value: []byte(group)},
	)
}

// maxLoggedHeader bounds how much of a header value read from a record a
// log line carries.
const maxLoggedHeader = 64

// HeaderValueAttr is how a header value read from a record goes into a log
// line: its first 64 bytes, quoted (control characters and invalid UTF-8
// escaped), and its length. A producer's header may be anything up to the
// record size; logged verbatim it would flood the logs.
func HeaderValueAttr(key, v string) slog.Attr {
	cut := v
	if len(cut) > maxLoggedHeader {
		cut = cut[:maxLoggedHeader]
	}
	return slog.Group(key, slog.String("prefix", strconv.Quote(cut)), slog.Int("bytes", len(v)))
}

// Header returns the value of the record's last header named key.
func (r Record) Header(key string) (string, bool) {
	return headerOf(r.Headers, key)
}

func headerOf(hs []Header, key string) (string, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return string(hs[i].Value), true
		}
	}
	return "", false
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// sleep waits d, or less when ctx ends first, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
