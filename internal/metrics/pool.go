package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PoolStats is what the database pool metrics report, read at each scrape
// (pgxpool.Stat's figures, without tying this package to pgx).
type PoolStats struct {
	Max, Total, Acquired int32         // idle is Total - Acquired
	Acquires             int64         // acquires that succeeded
	EmptyAcquires        int64         // of those, the ones that found no idle connection and waited
	EmptyAcquireWait     time.Duration // summed time those waited
}

// PoolCollector exposes the Postgres pool as billing_db_pool_* metrics. It
// is registered by New, so its names are always described, and reports
// nothing until Watch gives it a source (the pool exists only once the
// service has connected).
type PoolCollector struct {
	source atomic.Pointer[func() PoolStats]

	max, total, acquired, acquires, emptyAcquires, emptyWait *prometheus.Desc
}

func newPoolCollector() *PoolCollector {
	return &PoolCollector{
		max:      prometheus.NewDesc("billing_db_pool_max_connections", "Most connections the Postgres pool opens (BILLING_DB_MAX_CONNS).", nil, nil),
		total:    prometheus.NewDesc("billing_db_pool_connections", "Connections the Postgres pool holds open now, in use or idle.", nil, nil),
		acquired: prometheus.NewDesc("billing_db_pool_acquired_connections", "Connections of the Postgres pool in use now.", nil, nil),
		acquires: prometheus.NewDesc("billing_db_pool_acquires_total", "Connections taken from the Postgres pool.", nil, nil),
		emptyAcquires: prometheus.NewDesc("billing_db_pool_empty_acquires_total",
			"Takes from the Postgres pool that found no idle connection and waited for one (or for a new one).", nil, nil),
		emptyWait: prometheus.NewDesc("billing_db_pool_empty_acquire_wait_seconds_total",
			"Time spent waiting by takes that found the Postgres pool empty; its rate is the mean number of waiters.", nil, nil),
	}
}

// Watch makes the collector report what stats returns at each scrape.
func (c *PoolCollector) Watch(stats func() PoolStats) { c.source.Store(&stats) }

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.max, c.total, c.acquired, c.acquires, c.emptyAcquires, c.emptyWait} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.source.Load()
	if src == nil {
		return
	}
	s := (*src)()
	gauge := func(d *prometheus.Desc, v int32) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	gauge(c.max, s.Max)
	gauge(c.total, s.Total)
	gauge(c.acquired, s.Acquired)
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.Acquires))
	ch <- prometheus.MustNewConstMetric(c.emptyAcquires, prometheus.CounterValue, float64(s.EmptyAcquires))
	ch <- prometheus.MustNewConstMetric(c.emptyWait, prometheus.CounterValue, s.EmptyAcquireWait.Seconds())
}
