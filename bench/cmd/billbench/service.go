package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/procstat"
)

// cell is one configuration measured: gateway latency × in-flight, with the
// service's default pool and new events, or one of two variants at 0 ms: an
// all-duplicate stream (dup), or a pool wider than the default (conns).
type cell struct {
	latency  time.Duration
	inFlight int
	// dup: every event consumed was billed before by the same consumer
	// group (seeded in the database), so every outcome is duplicate.
	dup bool
	// conns, when not 0, is the BILLING_DB_MAX_CONNS the service runs with
	// instead of its default: the wide-pool cell, which has no ceiling of
	// its own and is measured right after its default-pool twin.
	conns int
}

func (c cell) String() string {
	switch {
	case c.dup:
		return fmt.Sprintf("%s/dup/%d", fmtLatency(c.latency), c.inFlight)
	case c.conns > 0:
		return fmt.Sprintf("%s/%d/%d conns", fmtLatency(c.latency), c.inFlight, c.conns)
	}
	return fmt.Sprintf("%s/%d", fmtLatency(c.latency), c.inFlight)
}

// pool is the service's BILLING_DB_MAX_CONNS in c.
func (c cell) pool() int {
	if c.conns > 0 {
		return c.conns
	}
	return config.DefaultDBMaxConns(c.inFlight)
}

// plain is the cell of c's latency and in-flight with new events and the
// default pool: the wide-pool cell's twin.
func (c cell) plain() cell { return cell{latency: c.latency, inFlight: c.inFlight} }

// clients is the database concurrency of the service in c: its pool, or
// fewer when fewer events can be in flight. pgbench runs with as many
// clients, so both press Postgres equally hard.
func (c cell) clients() int { return min(c.inFlight, c.pool()) }

// group is the G of c's grouped ceiling: the events in flight per database
// client, the most the grouped service can put in one statement on average
// when every connection is busy (at least 1).
func (c cell) group() int { return max(1, c.inFlight/c.clients()) }

func fmtLatency(d time.Duration) string {
	if d == 0 {
		return "0 ms"
	}
	return fmt.Sprintf("%g ms", float64(d)/float64(time.Millisecond))
}

// serviceRun is one measured run of bin/billing.
type serviceRun struct {
	cell      cell
	name      string
	events    int
	rate      float64       // events/s between 10% and 90% of the events final
	steady    time.Duration // that interval
	commitLag time.Duration // from the last outcome to the group's offsets committed at the end
	hwm       int64         // VmHWM, bytes
	cpu       cpuShare      // over the steady interval
	problems  []string      // anything that makes the run suspect (wrong outcomes, bad exit)
	// ceiling is the tps of the pgbench run of the same rep at this cell's
	// client count, made just before its cells (0 ms first): the run's own
	// ceiling. grouped is the events/s of the grouped script's run of the
	// same rep, at that client count and the cell's group size.
	ceiling, grouped float64

	meanHandle  time.Duration // mean time an event is in flight, over the interval
	meanGateway time.Duration // mean gateway call, over the interval
	// meanBusy is the mean of billing_db_pool_acquired_connections over the
	// interval's samples: how much of the pool was at work.
	meanBusy float64
	// pool is billing_db_pool_max_connections as the service reported it
	// (0 if it did not): the pool it really ran with.
	pool float64
	// groupReserve and groupSettle are the mean events per group
	// statement over the interval (billing_db_group_events); 0 when the
	// binary does not export it or grouped nothing.
	groupReserve, groupSettle float64
	// publishP50 and publishP99 are quantiles of billing_publish_lag_seconds
	// over the whole run (transition to acknowledged write of its invoice
	// event), read once every event of the run is published; published
	// counts them (0: a binary that publishes nothing, or a dup run).
	publishP50, publishP99 time.Duration
	published              float64
	// allocs and allocBytes are the service's heap allocations per event
	// over the interval (go_memstats_mallocs_total and
	// go_memstats_alloc_bytes_total, which include what the scrapes
	// themselves allocate); 0 when the binary does not export them.
	allocs, allocBytes float64
	// profile is what a profiled run (profiling on) gave; zero otherwise.
	profile cellProfile
}

// scrapeInterval is how often /metrics is read (/proc only at the samples
// the figures use). Both ends of the measured interval are samples, so the
// interval only sets the resolution; each scrape costs the service a little
// CPU, as Prometheus's would, only more often.
const scrapeInterval = 200 * time.Millisecond

// runService measures one run of cell with n events; with prof, the
// service runs with BILLING_PPROF on and the run takes its profiles.
func runService(ctx context.Context, e *env, o options, c cell, name string, n int, expectRate float64, prof *profiling, log *slog.Logger) (r serviceRun, err error) {
	r = serviceRun{cell: c, name: name, events: n}
	log = log.With(slog.String("run", name), slog.String("cell", c.String()), slog.Int("events", n))
	if err := e.truncate(ctx); err != nil {
		return r, err
	}
	topic, group := name, name
	if err := e.kc.EnsureTopics(ctx, []kafkaclient.TopicSpec{{Name: topic, Partitions: o.partitions}}); err != nil {
		return r, err
	}
	t := time.Now()
	events, err := produce(ctx, e, topic, name, n, c.dup)
	if err != nil {
		return r, err
	}
	log.Debug("events produced", slog.Duration("took", time.Since(t)))
	if c.dup {
		t = time.Now()
		if err := seedBilled(ctx, e, group, events); err != nil {
			return r, err
		}
		log.Debug("events seeded as billed", slog.Duration("took", time.Since(t)))
	}

	// An all-duplicate run must not call the gateway at all: its stub
	// keeps the call log, which stays empty unless something is wrong.
	stub := gatewaystub.New(gatewaystub.Options{Latency: c.latency, NoCallLog: !c.dup})
	gwURL, err := stub.StartLean()
	if err != nil {
		return r, err
	}
	defer stub.Close()

	extra := map[string]string{}
	if c.conns > 0 {
		extra["BILLING_DB_MAX_CONNS"] = strconv.Itoa(c.conns)
	}
	if prof != nil {
		extra["BILLING_PPROF"] = "true"
	}
	proc, err := startBilling(ctx, e, name, topic, group, gwURL, c.inFlight, extra)
	if err != nil {
		return r, err
	}
	defer proc.close()
	pid := proc.pid()

	// Measure from billing_events_total: samples of (time, events final,
	// CPU), the rate between the first sample at 10% of the events and the
	// first at 90%, so that neither the start (connections, first fetches,
	// group join) nor the tail (the last partitions draining alone) weighs
	// in, and both ends of the interval are exact points of the curve.
	stall := time.Minute + time.Duration(4*float64(n)/expectRate*float64(time.Second))
	watch := newStallWatch(stall)
	// Uncompressed: gzip five times a second would cost the service CPU that
	// Prometheus, scraping every 15-30 s, never takes from it.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	metricsURL := proc.metricsURL()
	// CPU is read from /proc only at the samples the figures use (the
	// first, the first at 10% and at 90% of the events, the last): reading
	// every process's stat five times a second cost the driver more CPU than
	// the figures can spare.
	type sample struct {
		at     time.Time
		total  float64
		cpu    *cpuSnap // nil when not taken
		series map[string]float64
	}
	var (
		samples  []sample
		outcomes map[string]float64
	)
	crossed := func(frac, total float64) bool { // the first sample at frac of the events
		return total >= frac*float64(n) && (len(samples) == 0 || samples[len(samples)-1].total < frac*float64(n))
	}
	tick := time.NewTicker(scrapeInterval)
	defer tick.Stop()
	var profiled chan cellProfile // once the profiles are being taken
	for len(samples) == 0 || samples[len(samples)-1].total < float64(n) {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%w with %v of %d events final; the service's log ends:\n%s", ctx.Err(), outcomes, n, proc.logTail())
		case err := <-proc.exited:
			return r, proc.died(err)
		case <-tick.C:
		}
		var final float64
		if len(samples) > 0 {
			final = samples[len(samples)-1].total
		}
		if watch.stalled(final) {
			return r, fmt.Errorf("%d events not handled: none for %s (%v so far); its log ends:\n%s", n, stall, outcomes, proc.logTail())
		}
		series := map[string]float64{}
		m, err := scrapeOutcomes(ctx, client, metricsURL, series)
		if err != nil {
			continue // not listening yet
		}
		outcomes = m
		var total float64
		for _, v := range m {
			total += v
		}
		sm := sample{at: time.Now(), total: total, series: series}
		if len(samples) == 0 || crossed(0.1, total) || crossed(0.9, total) || total >= float64(n) {
			snap := takeCPUSnap(pid, e.brokerPID)
			sm.cpu = &snap
		}
		samples = append(samples, sm)
		if prof != nil && profiled == nil && total >= profileFrom*float64(n) {
			profiled = make(chan cellProfile, 1)
			go func() { profiled <- takeProfiles(ctx, "http://"+proc.addr, prof) }()
		}
	}
	first := func(frac float64) int {
		for i, sm := range samples {
			if sm.total >= frac*float64(n) {
				return i
			}
		}
		return len(samples) - 1
	}
	a, b := first(0.1), first(0.9)
	if b == a { // too fast for the scrape interval: the whole run, less precise
		a = 0
		for a < len(samples)-1 && samples[a].total == 0 {
			a++
		}
		a = max(a-1, 0)
		b = len(samples) - 1
	}
	r.steady = samples[b].at.Sub(samples[a].at)
	if r.steady > 0 {
		r.rate = (samples[b].total - samples[a].total) / r.steady.Seconds()
	}
	ca := a
	for samples[ca].cpu == nil { // only in the too-fast case: from the first sample
		ca--
	}
	r.cpu = share(*samples[ca].cpu, *samples[b].cpu)
	mean := func(name string) time.Duration {
		sum := samples[b].series[name+"_sum"] - samples[a].series[name+"_sum"]
		count := samples[b].series[name+"_count"] - samples[a].series[name+"_count"]
		if count <= 0 {
			return 0
		}
		return time.Duration(sum / count * float64(time.Second))
	}
	r.meanHandle, r.meanGateway = mean("billing_handle_duration_seconds"), mean("billing_payment_duration_seconds")
	groupMean := func(op string) float64 {
		sum := samples[b].series[groupSeries(op, "sum")] - samples[a].series[groupSeries(op, "sum")]
		count := samples[b].series[groupSeries(op, "count")] - samples[a].series[groupSeries(op, "count")]
		if count <= 0 {
			return 0
		}
		return sum / count
	}
	r.groupReserve, r.groupSettle = groupMean("reserve"), groupMean("settle")
	for _, sm := range samples[a : b+1] {
		r.meanBusy += sm.series[busySeries] / float64(b-a+1)
	}
	r.pool = samples[b].series[poolSeries]
	if d := samples[b].total - samples[a].total; d > 0 {
		r.allocs = (samples[b].series[mallocsSeries] - samples[a].series[mallocsSeries]) / d
		r.allocBytes = (samples[b].series[allocBytesSeries] - samples[a].series[allocBytesSeries]) / d
	}
	switch {
	case profiled != nil:
		r.profile = <-profiled // the profile may outlast the events: it ends within its seconds
	case prof != nil:
		r.profile = cellProfile{problem: "every event was final before the profiles could start"}
	}
	if r.rate == 0 {
		r.problems = append(r.problems, "every event was final before the second scrape: too short to measure (raise -steady)")
	}
	t1 := samples[len(samples)-1].at
	if r.hwm, err = procstat.PeakRSS(pid); err != nil {
		return r, err
	}

	// The offsets must reach the end too: that is when the work is done.
	for {
		lag, err := e.kc.Lag(ctx, group, topic)
		var sum int64
		for _, v := range lag {
			sum += v
		}
		if err == nil && sum == 0 {
			r.commitLag = time.Since(t1)
			break
		}
		if time.Since(t1) > 30*time.Second {
			r.problems = append(r.problems, fmt.Sprintf("offsets not committed to the end 30s after the last event (lag %d, %v)", sum, err))
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%w waiting for the offsets to be committed (lag %d)", ctx.Err(), sum)
		case <-tick.C:
		}
	}

	// Every invoice event published: the relay runs behind the settles.
	r.published, r.publishP50, r.publishP99 = waitPublished(ctx, client, metricsURL, outcomes)

	// A clean drain: SIGTERM, exit 0.
	if problem := proc.terminate(); problem != "" {
		r.problems = append(r.problems, problem)
	}

	// Every event billed exactly once: by this run, or (dup) by the seed
	// only, this run calling the gateway for none and writing nothing.
	want := "charged"
	if c.dup {
		want = string(order.OutcomeDuplicate)
	}
	if outcomes[want] != float64(n) {
		r.problems = append(r.problems, fmt.Sprintf("outcomes %v, want %d %s", outcomes, n, want))
	}
	wantCharges := n
	if c.dup {
		wantCharges = 0
		if got := len(stub.Calls()); got != 0 {
			r.problems = append(r.problems, fmt.Sprintf("gateway calls %d, want none", got))
		}
	}
	if got := len(stub.Charges()); got != wantCharges {
		r.problems = append(r.problems, fmt.Sprintf("gateway charges %d, want %d", got, wantCharges))
	}
	if rows, err := countRows(ctx, e); err != nil || rows != (tableCounts{invoices: n, charged: n, dedup: n}) {
		r.problems = append(r.problems, fmt.Sprintf("invoices %d, charged %d, dedup rows %d (%v), want %d of each", rows.invoices, rows.charged, rows.dedup, err, n))
	}
	for _, p := range r.problems {
		log.Warn("run suspect", slog.String("problem", p))
	}
	log.Info("service run", slog.Float64("events_per_s", round1(r.rate)), slog.Duration("steady", r.steady.Round(time.Millisecond)),
		slog.Float64("rss_mib", round1(float64(r.hwm)/(1<<20))), slog.Duration("commit_lag", r.commitLag.Round(time.Millisecond)))
	return r, nil
}

// produce writes n distinct valid events to topic, keyed by order id, and
// returns them when keep is set.
func produce(ctx context.Context, e *env, topic, prefix string, n int, keep bool) ([]order.OrderConfirmedEvent, error) {
	w := &kafkago.Writer{
		Addr:                   kafkago.TCP(e.brokers...),
		Topic:                  topic,
		Balancer:               &kafkago.Hash{},
		BatchSize:              1000,
		BatchBytes:             4 << 20,
		BatchTimeout:           5 * time.Millisecond,
		RequiredAcks:           kafkago.RequireAll,
		AllowAutoTopicCreation: false,
		Transport:              e.transport(),
	}
	defer w.Close()
	now := time.Now().UTC()
	var kept []order.OrderConfirmedEvent
	if keep {
		kept = make([]order.OrderConfirmedEvent, 0, n)
	}
	const chunk = 5000
	msgs := make([]kafkago.Message, 0, chunk)
	for i := range n {
		evt, err := order.NewOrderConfirmedEvent(order.Order{
			ID:          fmt.Sprintf("%s-ord-%07d", prefix, i),
			CustomerID:  fmt.Sprintf("cus-%d", i%997),
			TotalAmount: 1000 + int64(i%9000),
			Currency:    "EUR",
			ConfirmedAt: now,
		})
		if err != nil {
			return nil, err
		}
		b, err := wire.Encode(evt)
		if err != nil {
			return nil, err
		}
		if keep {
			kept = append(kept, evt)
		}
		msgs = append(msgs, kafkago.Message{Key: []byte(evt.OrderID), Value: b})
		if len(msgs) == chunk || i == n-1 {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				return nil, fmt.Errorf("produce to %s: %w", topic, err)
			}
			msgs = msgs[:0]
		}
	}
	return kept, nil
}

// waitPublished waits until billing has published an invoice event for
// every charged and declined event of the run, or has published none more
// for 30 s, and returns how many it published and the p50 and p99 of their
// publish lag, interpolated within the histogram's buckets as Prometheus's
// histogram_quantile does.
func waitPublished(ctx context.Context, client *http.Client, url string, outcomes map[string]float64) (float64, time.Duration, time.Duration) {
	want := outcomes["charged"] + outcomes["declined"]
	watch := newStallWatch(30 * time.Second)
	var last float64
	for {
		series := map[string]float64{}
		if _, err := scrapeOutcomes(ctx, client, url, series); err == nil {
			last = series[publishedCount]
			if last >= want || watch.stalled(last) {
				return last, histogramQuantile(0.5, series), histogramQuantile(0.99, series)
			}
		} else if watch.stalled(last) {
			return 0, 0, 0
		}
		select {
		case <-ctx.Done():
			return 0, 0, 0
		case <-time.After(scrapeInterval):
		}
	}
}

// publishedCount is the count of billing_publish_lag_seconds: one per
// published invoice event.
const publishedCount = "billing_publish_lag_seconds_count"

// publishBucket is the prefix of billing_publish_lag_seconds' buckets.
const publishBucket = `billing_publish_lag_seconds_bucket{le="`

// histogramQuantile is q of the publish-lag histogram in series (its
// cumulative buckets by upper bound), linear within the bucket that holds
// it; 0 without observations.
func histogramQuantile(q float64, series map[string]float64) time.Duration {
	type bucket struct{ le, count float64 }
	var bs []bucket
	for name, v := range series {
		le, ok := strings.CutPrefix(name, publishBucket)
		if !ok {
			continue
		}
		bound, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{bound, v})
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return 0
	}
	rank := q * bs[len(bs)-1].count
	lower, below := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) { // past the last finite bound: that bound
				return time.Duration(lower * float64(time.Second))
			}
			frac := 0.0
			if b.count > below {
				frac = (rank - below) / (b.count - below)
			}
			return time.Duration((lower + (b.le-lower)*frac) * float64(time.Second))
		}
		lower, below = b.le, b.count
	}
	return time.Duration(lower * float64(time.Second))
}

// meanSeries are the histogram sums and counts scraped beside the outcomes,
// for the mean time an event is in flight and a gateway call takes, and the
// pool's connections in use.
var meanSeries = []string{
	"billing_handle_duration_seconds_sum", "billing_handle_duration_seconds_count",
	"billing_payment_duration_seconds_sum", "billing_payment_duration_seconds_count",
	busySeries, poolSeries, mallocsSeries, allocBytesSeries,
	groupSeries("reserve", "sum"), groupSeries("reserve", "count"),
	groupSeries("settle", "sum"), groupSeries("settle", "count"),
}

// groupSeries is a series of billing_db_group_events, the histogram of
// events per group statement of the grouped store, by op
// (reserve, settle). A binary without it leaves the means at 0.
func groupSeries(op, part string) string {
	return `billing_db_group_events_` + part + `{op="` + op + `"}`
}

const (
	busySeries       = "billing_db_pool_acquired_connections"
	poolSeries       = "billing_db_pool_max_connections"
	mallocsSeries    = "go_memstats_mallocs_total"
	allocBytesSeries = "go_memstats_alloc_bytes_total"
)

// scrapeOutcomes reads billing_events_total by outcome from /metrics, and
// the meanSeries into series.
func scrapeOutcomes(ctx context.Context, client *http.Client, url string, series map[string]float64) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const prefix = `billing_events_total{outcome="`
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), " "); ok && (slices.Contains(meanSeries, name) ||
			name == publishedCount || strings.HasPrefix(name, publishBucket)) {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				series[name] = v
			}
			continue
		}
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		label, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metric %q: %w", sc.Text(), err)
		}
		out[label] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no billing_events_total in /metrics")
	}
	return out, nil
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// floodStall is how long a memory line may go without one more event final
// before it fails as stuck.
const floodStall = 5 * time.Minute

// stallWatch fails a wait that stops moving rather than one that is slow:
// on a machine busy with other work a run can take many times as long as
// on a quiet one, and only a count that has stopped changing says that it
// is stuck. The driver's caller bounds the whole run (make bench has no
// limit; the smoke test has go test's -timeout).
type stallWatch struct {
	limit time.Duration
	last  float64
	moved time.Time
}

func newStallWatch(limit time.Duration) *stallWatch {
	return &stallWatch{limit: limit, moved: time.Now()}
}

// stalled records v, the count the wait is about, and reports whether it
// has not changed for longer than the limit.
func (w *stallWatch) stalled(v float64) bool {
	if v != w.last {
		w.last, w.moved = v, time.Now()
		return false
	}
	return time.Since(w.moved) > w.limit
}
