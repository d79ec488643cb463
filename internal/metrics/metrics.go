// Package metrics declares every Prometheus metric billing exposes
// (docs/interface.md §8) on a registry handed in by its caller (internal/app makes
// one per App), so tests get a fresh registry each and nothing lands on the
// global default.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/acme/billing/core/order"
)

// Metrics holds the service's collectors.
type Metrics struct {
	Events            *prometheus.CounterVec   // outcome
	HandleDuration    prometheus.Histogram     //
	PaymentRequests   *prometheus.CounterVec   // code
	PaymentDuration   prometheus.Histogram     //
	ConsumerLag       *prometheus.GaugeVec     // topic, partition
	ConsumerCommitted *prometheus.GaugeVec     // topic, partition
	Assigned          *prometheus.GaugeVec     // topic, partition: 1 while this process owns it
	InFlight          *prometheus.GaugeVec     // topic
	DedupRowsDeleted  prometheus.Counter       //
	DedupPartitions   prometheus.Gauge         //
	ConsumerPaused    prometheus.Gauge         // set through OutagePaused
	RoutedWrites      *prometheus.CounterVec   // topic, result
	Commits           *prometheus.CounterVec   // result
	HandlerPanics     prometheus.Counter       //
	MaintenanceRuns   *prometheus.CounterVec   // result
	MaintenanceLast   prometheus.Gauge         //
	DLQRecords        *prometheus.GaugeVec     // topic
	EventDelay        prometheus.Histogram     //
	ReplayedEvents    *prometheus.CounterVec   // outcome
	AttemptWaits      *prometheus.CounterVec   // topic
	AttemptWaiting    prometheus.Gauge         //
	DBGroupEvents     *prometheus.HistogramVec // op
	DBPool            *PoolCollector           // billing_db_pool_*, once Watch is called
	InvoicesPending   prometheus.Gauge         // from Postgres, by the pending completer
	PendingOldest     prometheus.Gauge         // from Postgres, by the pending completer
	InvoicesHeld      prometheus.Gauge         // from Postgres, by the pending completer
	PublishedEvents   *prometheus.CounterVec   // type
	OutboxPending     prometheus.Gauge         // from Postgres, by the outbox relay
	OutboxOldest      prometheus.Gauge         // from Postgres, by the outbox relay
	PublishLag        prometheus.Histogram     //
	// The configured BILLING_GATEWAY_KEY_TTL and BILLING_PENDING_RESUME_AFTER,
	// set once at start: the alerts on pending invoices compare ages with
	// them rather than with numbers that a changed setting would make wrong.
	GatewayKeyTTL      prometheus.Gauge    //
	PendingResumeAfter prometheus.Gauge    //
	Gathered           prometheus.Gatherer // what /metrics serves
	// ReadBudget is the process's memory budget for what it reads from
	// Kafka (adapters/in/kafka.MemoryBudget): its size, and what it holds.
	ReadBudget *prometheus.GaugeVec // kind: limit, held

	// GatewayProtocolErrors counts the gateway's replies that break its
	// protocol (docs/interface.md §6), by kind; the gateway client creates each
	// kind it counts at zero (httpgateway.WithMetrics).
	GatewayProtocolErrors *prometheus.CounterVec // kind

	// ConsumptionPaused is billing_consumption_paused{by}: outage (what
	// billing_consumer_paused says, through OutagePaused), operator
	// (`billing consume pause`) and release (the release gate).
	ConsumptionPaused *prometheus.GaugeVec // by
	// OperatorPause is the `billing consume pause` in force: one series,
	// labelled with who decided it, valued with when; none while
	// consumption is not paused by an operator.
	OperatorPause *prometheus.GaugeVec // decided_by
	// BackgroundLastSuccess is when each background service (Service*)
	// last completed a pass: the gauges read from Postgres are as fresh as
	// it says. The caller creates the label of each service it runs.
	BackgroundLastSuccess *prometheus.GaugeVec // service
	// ReconcileDiscrepancies and ReconcileLastRun are the last `billing
	// reconcile` run kept in Postgres, read by the pending completer's
	// pass: a CronJob is never scraped, so every pod exports its result.
	ReconcileDiscrepancies *prometheus.GaugeVec // kind
	ReconcileLastRun       prometheus.Gauge     //
}

// The service label values of billing_background_last_success_timestamp_seconds.
const (
	ServiceCompleter  = "completer"  // the pending completer: billing_invoices_pending, …_held, billing_invoice_pending_oldest_seconds, billing_reconcile_*
	ServiceRelay      = "relay"      // the outbox relay: billing_outbox_pending, billing_outbox_oldest_seconds
	ServiceMaintainer = "maintainer" // the dedup maintainer: billing_dedup_partitions
)

// New registers every metric on reg (and the Go and process collectors when
// withRuntime is true) and returns them. Every outcome label is created at
// zero so that rate() works from the first scrape.
func New(reg *prometheus.Registry, withRuntime bool) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_events_total",
			Help: "Events whose outcome is final, by outcome (charged, declined, duplicate, duplicate_order, retried, dead_lettered).",
		}, []string{"outcome"}),
		HandleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "billing_handle_duration_seconds",
			Help:    "Time to handle one event, from the start of its handling (after a retry record's x-not-before) to its final outcome, including routing to a retry tier or the DLQ.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		PaymentRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_payment_requests_total",
			Help: "Requests to the payment gateway by HTTP status code (\"error\" when no reply arrived).",
		}, []string{"code"}),
		PaymentDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "billing_payment_duration_seconds",
			Help:    "Latency of payment gateway requests, replies and failures alike.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		ConsumerLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_consumer_lag",
			Help: "Messages between the consumer group's committed offset and the partition's high-water mark.",
		}, []string{"topic", "partition"}),
		InFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_in_flight",
			Help: "Events fetched and not yet final in this process, by topic (the main topic or a retry tier).",
		}, []string{"topic"}),
		DedupRowsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "billing_dedup_rows_deleted_total",
			Help: "processed_event rows removed by retention (dropped partitions and batched deletes).",
		}),
		DedupPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_dedup_partitions",
			Help: "Range partitions of processed_event, as last seen by dedup maintenance.",
		}),
		ConsumerPaused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_consumer_paused",
			Help: "1 while consumption is paused because a dependency is unavailable.",
		}),
		ConsumptionPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_consumption_paused",
			Help: "1 while consumption is paused, by reason: outage (a dependency is unavailable; the pod is not ready), operator (billing consume pause), release (a member of a release this one is not safe beside is in the consumer groups); the pod stays ready for the last two.",
		}, []string{"by"}),
		OperatorPause: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_operator_pause_timestamp_seconds",
			Help: "Unix time of the billing consume pause in force, labelled with who decided it (decided_by); absent while consumption is not paused by an operator.",
		}, []string{"decided_by"}),
		RoutedWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_routed_writes_total",
			Help: "Writes of failed events to retry tiers and the DLQ, by topic and result (ok; error: failed, retried; refused: refused for good, so retried without its value or, refused again, given up).",
		}, []string{"topic", "result"}),
		Commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_offset_commits_total",
			Help: "Offset commits to Kafka by result (ok, error).",
		}, []string{"result"}),
		HandlerPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "billing_handler_panics_total",
			Help: "Records whose handling panicked; each was dead-lettered as a permanent error.",
		}),
		MaintenanceRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_dedup_maintenance_runs_total",
			Help: "Dedup maintenance passes by result (ok, error, skipped: another process holds the lock).",
		}, []string{"result"}),
		MaintenanceLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_dedup_maintenance_last_success_timestamp_seconds",
			Help: "Unix time of the last dedup maintenance pass that finished without error.",
		}),
		InvoicesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_invoices_pending",
			Help: "Invoices pending in Postgres (all processes), as of the pending completer's last pass.",
		}),
		PendingOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_invoice_pending_oldest_seconds",
			Help: "How long the oldest pending invoice has been pending under its Idempotency-Key, as of the pending completer's last pass; must stay well under BILLING_GATEWAY_KEY_TTL.",
		}),
		InvoicesHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_invoices_held",
			Help: "Invoices held for a person in Postgres (all processes: a 422, or a key past half of BILLING_GATEWAY_KEY_TTL), as of the pending completer's last pass; settled with billing invoice resolve.",
		}),
		PublishedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_published_events_total",
			Help: "Invoice events published to BILLING_KAFKA_INVOICE_TOPIC and acknowledged, by type (InvoiceCharged, InvoiceDeclined, InvoiceRejected, InvoiceHeld); a row published again after a crash counts again.",
		}, []string{"type"}),
		OutboxPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_outbox_pending",
			Help: "Invoice events written and not yet published (all processes), as of the outbox relay's last count.",
		}),
		OutboxOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_outbox_oldest_seconds",
			Help: "Age of the oldest invoice event not yet published, as of the outbox relay's last count; grows while Kafka refuses the writes.",
		}),
		PublishLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "billing_publish_lag_seconds",
			Help:    "Time from an invoice's transition to the acknowledged write of its event, per event published.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		GatewayKeyTTL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_gateway_key_ttl_seconds",
			Help: "BILLING_GATEWAY_KEY_TTL: how long the gateway keeps an Idempotency-Key; a pending invoice is held at half of it.",
		}),
		PendingResumeAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_pending_resume_after_seconds",
			Help: "BILLING_PENDING_RESUME_AFTER: a pending invoice older than this is resumed by the service itself.",
		}),
		// Beside billing_consumer_lag, from the same broker answers: a
		// partition whose lag stays above zero while this does not move is
		// stuck, however busy the others are.
		ConsumerCommitted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_consumer_committed_offset",
			Help: "The consumer group's committed offset of the partition (its log start while the group has committed none), as the brokers report it.",
		}, []string{"topic", "partition"}),
		// Which pod owns which partition (a runbook restarts the owner of a
		// stuck one): a series per partition this process holds in the
		// group's current generation, removed when the generation ends, so
		// that max by (pod) of it names the owner. Bounded by the
		// partitions of the main topic and the tiers.
		Assigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_partition_assigned",
			Help: "1 for each partition (main topic or a retry tier) this process owns in its consumer group's current generation; absent otherwise.",
		}, []string{"topic", "partition"}),
		// Read from the brokers (high-water mark minus log start, summed over
		// partitions), so it stays up after the dead letter that raised it:
		// an alert on it does not resolve by itself minutes later.
		DLQRecords: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_dlq_records",
			Help: "Records in the DLQ topic, as the brokers count them (sum over partitions of high-water mark minus log start).",
		}, []string{"topic"}),
		// The SLI of deploy/README.md ("orders final within 60 s"): 60 must
		// stay a bucket boundary.
		EventDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "billing_event_delay_seconds",
			Help:    "Time from an order's occurred_at (the record's timestamp when it cannot be read) to its final outcome (charged, declined, duplicate or dead-lettered), once per event, never per hop through the retry tiers.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}),
		// A replayed record's event was observed in EventDelay when it was
		// dead-lettered; hours later its occurred_at is old, and observing
		// it again would count the replay as orders billed late.
		ReplayedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_replayed_events_total",
			Help: "Records written back by billing dlq replay (x-replayed-at) whose handling ended, by outcome (as billing_events_total, retried included); they are not observed again in billing_event_delay_seconds.",
		}, []string{"outcome"}),
		// The fence's wait (docs/interface.md §4): an event that finds another
		// path's attempt of its invoice alive waits in place, sending
		// nothing and holding its partition's commits behind it.
		AttemptWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_attempt_waits_total",
			Help: "Events that found another path's attempt of their invoice in flight and waited for it, by topic (counted once per event, when its wait starts).",
		}, []string{"topic"}),
		AttemptWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_attempt_waiting",
			Help: "Events waiting now for another path's attempt of their invoice to end.",
		}),
		// How well the store groups the database work of concurrent
		// events (infra/postgres.Store): 1 while events are few, larger
		// while they queue for the database. Mean events per statement =
		// rate(_sum) / rate(_count).
		DBGroupEvents: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "billing_db_group_events",
			Help:    "Events per grouped database statement, by op (reserve, settle).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}, []string{"op"}),
		ReadBudget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_read_budget_bytes",
			Help: "The process's memory budget for what it reads from Kafka (kind=limit: twice BILLING_KAFKA_MAX_BATCH_BYTES), and what it holds (kind=held: batches being decompressed and records from their decoding to their final outcome).",
		}, []string{"kind"}),
		BackgroundLastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_background_last_success_timestamp_seconds",
			Help: "Unix time of the last pass each background service (completer, relay, maintainer) completed; a pass skipped because consumption is paused counts. The gauges each reads from Postgres are as fresh as this.",
		}, []string{"service"}),
		ReconcileDiscrepancies: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "billing_reconcile_discrepancies",
			Help: "Discrepancies between the invoices and the payment provider's records found by the last billing reconcile run kept in Postgres, by kind (money_without_charged_invoice, charged_invoice_without_money, amount_mismatch, double_charge); 0 before any run.",
		}, []string{"kind"}),
		ReconcileLastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "billing_reconcile_last_run_timestamp_seconds",
			Help: "Unix time the last billing reconcile run kept in Postgres finished (0: none yet); as fresh as the pending completer's last pass.",
		}),
		DBPool:   newPoolCollector(),
		Gathered: reg,
		GatewayProtocolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "billing_gateway_protocol_errors_total",
			Help: "Replies of the payment gateway that break its protocol, by kind (a charge id billing cannot keep, a success without \"succeeded\", an unreadable body, an unexpected status, oversized headers); a charge stands whatever its charge id.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.ReadBudget)
	m.ReadBudget.WithLabelValues("limit")
	m.ReadBudget.WithLabelValues("held")
	reg.MustRegister(m.Events, m.HandleDuration, m.PaymentRequests, m.PaymentDuration,
		m.ConsumerLag, m.InFlight, m.DedupRowsDeleted, m.DedupPartitions, m.ConsumerPaused, m.ConsumptionPaused, m.OperatorPause,
		m.RoutedWrites, m.Commits, m.MaintenanceRuns, m.MaintenanceLast, m.DBPool,
		m.InvoicesPending, m.PendingOldest, m.InvoicesHeld, m.PublishedEvents, m.OutboxPending, m.OutboxOldest, m.PublishLag,
		m.GatewayKeyTTL, m.PendingResumeAfter, m.ConsumerCommitted, m.HandlerPanics, m.DLQRecords, m.EventDelay, m.DBGroupEvents,
		m.GatewayProtocolErrors, m.BackgroundLastSuccess, m.ReplayedEvents, m.AttemptWaits, m.AttemptWaiting, m.Assigned,
		m.ReconcileDiscrepancies, m.ReconcileLastRun)
	if withRuntime {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, o := range order.Outcomes() {
		m.Events.WithLabelValues(string(o))
		m.ReplayedEvents.WithLabelValues(string(o))
	}
	for _, t := range order.InvoiceEventTypes() {
		m.PublishedEvents.WithLabelValues(string(t))
	}
	for _, r := range []string{"ok", "error", "skipped"} {
		m.MaintenanceRuns.WithLabelValues(r)
	}
	for _, op := range []string{"reserve", "settle"} {
		m.DBGroupEvents.WithLabelValues(op)
	}
	for _, c := range PaymentCodes {
		m.PaymentRequests.WithLabelValues(c)
	}
	for _, k := range order.DiscrepancyKinds() {
		m.ReconcileDiscrepancies.WithLabelValues(string(k))
	}
	for _, by := range PauseReasons() {
		m.ConsumptionPaused.WithLabelValues(by)
	}
	return m
}

// PauseReasons returns the values of billing_consumption_paused's by label.
func PauseReasons() []string { return []string{"outage", "operator", "release"} }

// OutagePaused is the gauge the outage pause sets: billing_consumer_paused,
// and billing_consumption_paused{by="outage"} with it, so the two never
// disagree.
func (m *Metrics) OutagePaused() prometheus.Gauge {
	return mirroredGauge{Gauge: m.ConsumerPaused, mirror: m.ConsumptionPaused.WithLabelValues("outage")}
}

// mirroredGauge is a gauge whose every change is made to mirror too.
type mirroredGauge struct {
	prometheus.Gauge
	mirror prometheus.Gauge
}

func (g mirroredGauge) Set(v float64) { g.Gauge.Set(v); g.mirror.Set(v) }
func (g mirroredGauge) Inc()          { g.Gauge.Inc(); g.mirror.Inc() }
func (g mirroredGauge) Dec()          { g.Gauge.Dec(); g.mirror.Dec() }
func (g mirroredGauge) Add(v float64) { g.Gauge.Add(v); g.mirror.Add(v) }
func (g mirroredGauge) Sub(v float64) { g.Gauge.Sub(v); g.mirror.Sub(v) }
func (g mirroredGauge) SetToCurrentTime() {
	g.Gauge.SetToCurrentTime()
	g.mirror.SetToCurrentTime()
}
