package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
)

// A background service gets its metrics as a small struct of its own,
// built here from Metrics (Relay, Completer): it sees the collectors it
// sets and no others, and a nil one records nothing, so its tests need no
// registry.

// Relay is what the outbox relay reports.
type Relay struct {
	published   *prometheus.CounterVec // type
	lag         prometheus.Observer
	pending     prometheus.Gauge
	oldest      prometheus.Gauge
	lastSuccess prometheus.Gauge
}

// Relay returns the outbox relay's metrics. It exports the relay's
// billing_background_last_success_timestamp_seconds at 0 from now: the
// label exists only for the services this process runs, so that an alert
// on a stale service never fires for one that does not run.
func (m *Metrics) Relay() *Relay {
	return &Relay{published: m.PublishedEvents, lag: m.PublishLag, pending: m.OutboxPending, oldest: m.OutboxOldest,
		lastSuccess: m.BackgroundLastSuccess.WithLabelValues(ServiceRelay)}
}

// Published counts events published at at, and observes how long after
// their transitions they left.
func (r *Relay) Published(events []order.InvoiceEvent, at time.Time) {
	if r == nil {
		return
	}
	for _, e := range events {
		r.published.WithLabelValues(string(e.Type())).Inc()
		r.lag.Observe(at.Sub(e.OccurredAt).Seconds())
	}
}

// Outbox sets billing_outbox_pending and billing_outbox_oldest_seconds.
func (r *Relay) Outbox(st order.OutboxStats) {
	if r == nil {
		return
	}
	r.pending.Set(float64(st.Pending))
	r.oldest.Set(st.Oldest.Seconds())
}

// Passed stamps a completed pass.
func (r *Relay) Passed() {
	if r != nil {
		setNow(r.lastSuccess)
	}
}

// Completer is what the pending completer reports.
type Completer struct {
	pending       prometheus.Gauge
	oldest        prometheus.Gauge
	held          prometheus.Gauge
	discrepancies *prometheus.GaugeVec // kind
	reconciled    prometheus.Gauge
	lastSuccess   prometheus.Gauge
}

// Completer returns the pending completer's metrics, its
// billing_background_last_success_timestamp_seconds at 0 from now (see
// Relay).
func (m *Metrics) Completer() *Completer {
	return &Completer{pending: m.InvoicesPending, oldest: m.PendingOldest, held: m.InvoicesHeld,
		discrepancies: m.ReconcileDiscrepancies, reconciled: m.ReconcileLastRun,
		lastSuccess: m.BackgroundLastSuccess.WithLabelValues(ServiceCompleter)}
}

// Pending sets the gauges read from Postgres: the pending and held
// invoices, the oldest pending one's age, and the last reconciliation's
// result (a CronJob is never scraped: the pods export it).
func (c *Completer) Pending(st order.PendingStats) {
	if c == nil {
		return
	}
	c.pending.Set(float64(st.Count))
	c.oldest.Set(st.Oldest.Seconds())
	c.held.Set(float64(st.Held))
	for _, k := range order.DiscrepancyKinds() {
		c.discrepancies.WithLabelValues(string(k)).Set(float64(st.Reconcile.Discrepancies[k]))
	}
	if !st.Reconcile.At.IsZero() {
		c.reconciled.Set(float64(st.Reconcile.At.UnixMilli()) / 1e3)
	}
}

// Passed stamps a completed pass.
func (c *Completer) Passed() {
	if c != nil {
		setNow(c.lastSuccess)
	}
}

// setNow sets g to the current time in seconds, to the millisecond.
func setNow(g prometheus.Gauge) { g.Set(float64(time.Now().UnixMilli()) / 1e3) }

// Maintenance is what the dedup maintenance reports.
type Maintenance struct {
	runs        *prometheus.CounterVec // result
	last        prometheus.Gauge       // when the work itself was last done
	partitions  prometheus.Gauge
	rowsDeleted prometheus.Counter
	lastSuccess prometheus.Gauge
}

// Maintenance returns the dedup maintenance's metrics, its
// billing_background_last_success_timestamp_seconds at 0 from now (see
// Relay).
func (m *Metrics) Maintenance() *Maintenance {
	return &Maintenance{runs: m.MaintenanceRuns, last: m.MaintenanceLast, partitions: m.DedupPartitions,
		rowsDeleted: m.DedupRowsDeleted, lastSuccess: m.BackgroundLastSuccess.WithLabelValues(ServiceMaintainer)}
}

// Done counts a pass that did its work, at now by the maintenance's
// clock, and stamps it.
func (m *Maintenance) Done(now time.Time) {
	if m == nil {
		return
	}
	m.runs.WithLabelValues("ok").Inc()
	m.last.Set(float64(now.UnixMilli()) / 1e3)
	setNow(m.lastSuccess)
}

// Skipped counts a pass that found another process at work: it completed
// its part, so it is stamped too.
func (m *Maintenance) Skipped() {
	if m == nil {
		return
	}
	m.runs.WithLabelValues("skipped").Inc()
	setNow(m.lastSuccess)
}

// Failed counts a pass that failed.
func (m *Maintenance) Failed() {
	if m != nil {
		m.runs.WithLabelValues("error").Inc()
	}
}

// Partitions sets billing_dedup_partitions.
func (m *Maintenance) Partitions(n int) {
	if m != nil {
		m.partitions.Set(float64(n))
	}
}

// RowsDeleted adds to billing_dedup_rows_deleted_total.
func (m *Maintenance) RowsDeleted(n int64) {
	if m != nil {
		m.rowsDeleted.Add(float64(n))
	}
}

// Consumer is what a Kafka consumer (adapters/in/kafka) sets: the
// collectors of its events, partitions, waits and commits. Its fields are
// Metrics' of the same names; the consumer needs them all.
type Consumer struct {
	Events         *prometheus.CounterVec // outcome
	ReplayedEvents *prometheus.CounterVec // outcome
	HandleDuration prometheus.Histogram
	EventDelay     prometheus.Histogram
	HandlerPanics  prometheus.Counter
	Assigned       *prometheus.GaugeVec   // topic, partition
	InFlight       *prometheus.GaugeVec   // topic
	AttemptWaits   *prometheus.CounterVec // topic
	AttemptWaiting prometheus.Gauge
	Commits        *prometheus.CounterVec // result
}

// Consumer returns the consumers' metrics.
func (m *Metrics) Consumer() *Consumer {
	return &Consumer{Events: m.Events, ReplayedEvents: m.ReplayedEvents, HandleDuration: m.HandleDuration,
		EventDelay: m.EventDelay, HandlerPanics: m.HandlerPanics, Assigned: m.Assigned, InFlight: m.InFlight,
		AttemptWaits: m.AttemptWaits, AttemptWaiting: m.AttemptWaiting, Commits: m.Commits}
}

// Router is what the router of failed records sets.
type Router struct {
	RoutedWrites *prometheus.CounterVec // topic, result
}

// Router returns the router's metrics.
func (m *Metrics) Router() *Router { return &Router{RoutedWrites: m.RoutedWrites} }

// ReadBudget is what the readers' memory budget sets:
// billing_read_budget_bytes, by kind (limit, held).
type ReadBudget struct {
	Bytes *prometheus.GaugeVec // kind
}

// Budget returns the memory budget's metrics.
func (m *Metrics) Budget() *ReadBudget { return &ReadBudget{Bytes: m.ReadBudget} }

// Gateway is what a payment adapter's request engine
// (adapters/out/http's Caller) sets.
type Gateway struct {
	Requests       *prometheus.CounterVec // code
	Duration       prometheus.Histogram
	ProtocolErrors *prometheus.CounterVec // kind
}

// Gateway returns the payment adapters' metrics.
func (m *Metrics) Gateway() *Gateway {
	return &Gateway{Requests: m.PaymentRequests, Duration: m.PaymentDuration, ProtocolErrors: m.GatewayProtocolErrors}
}

// Outage is what the readiness switch (internal/health's Pause) sets:
// billing_consumer_paused, which says whether consumption is paused for an
// outage.
type Outage struct {
	Paused prometheus.Gauge
}

// Outage returns the readiness switch's metrics.
func (m *Metrics) Outage() *Outage { return &Outage{Paused: m.OutagePaused()} }

// Hold is what the hold of consumption (adapters/in/kafka's Hold: an
// operator's pause, the release gate) sets: billing_consumption_paused by
// reason.
type Hold struct {
	Paused *prometheus.GaugeVec // by
}

// Hold returns the hold's metrics.
func (m *Metrics) Hold() *Hold { return &Hold{Paused: m.ConsumptionPaused} }
