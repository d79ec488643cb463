package main

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/billing/internal/config"
)

// The targets, checked on the medians of one report (a ratio to a ceiling,
// or between two cells, on the median of each run's ratio to the run it is
// paired with in its rep), each named for the work that set it:
//   - concurrency: many events in flight instead of one at a time;
//   - grouping: the database work of concurrent events grouped into one
//     statement each, whose bounds replace concurrency's where both check
//     the same (at 0 ms, in-flight 64 and 256);
//   - throughput: both of those;
//   - publishing: invoice events through the outbox;
//   - memory: peak RSS with large records (flood.go).
const (
	targetSpeedup     = 40.0        // throughput: at 20 ms, in-flight 64 over in-flight 1
	targetCeilingPct  = 60.0        // concurrency: at 0 ms, events/s as % of the per-event pgbench ceiling
	targetGroupedPct  = 100.0       // grouping: the same at in-flight 64 and 256 (concurrency's 60% there)
	targetDupPct      = 300.0       // grouping: the all-duplicate stream at in-flight 64, same ceiling
	targetWidePct     = 90.0        // grouping: the default pool's events/s as % of the wide pool's
	targetMaxConns    = 8           // grouping: the default pool at in-flight 256, at most
	targetPeakRSSMiB  = 100.0       // throughput
	targetPublishP99  = time.Second // publishing: invoice events' publish lag p99 at 0 ms, in-flight 64
	speedupLatency    = 20 * time.Millisecond
	speedupInFlight   = 64
	sequentialFlights = 1
	dupInFlight       = 64 // the all-duplicate target's in-flight
)

// groupedTargetInFlight are the in-flight values whose ceiling target is
// grouping's, at 0 ms.
var groupedTargetInFlight = []int{64, 256}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *result) rates(c cell) []float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, run.rate)
	}
	return out
}

func (r *result) rssMiB(c cell) []float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, float64(run.hwm)/(1<<20))
	}
	return out
}

func (r *result) ceiling(clients int) []float64 {
	var out []float64
	for _, p := range r.pgbench[clients] {
		out = append(out, p.tps)
	}
	return out
}

// groupedCeiling is the events/s of every grouped ceiling run of c's
// clients and group size.
func (r *result) groupedCeiling(c cell) []float64 {
	var out []float64
	for _, p := range r.grouped[groupKey{c.clients(), c.group()}] {
		out = append(out, p.events())
	}
	return out
}

// groupedPcts is, per run of c, its events/s as % of the grouped ceiling
// measured in the same rep just before it.
func (r *result) groupedPcts(c cell) []float64 {
	return r.pctsOf(c, func(run serviceRun) float64 { return run.grouped })
}

// ceilingPcts is, per run of c, its events/s as % of the ceiling measured
// just before it (runs without one are left out).
func (r *result) ceilingPcts(c cell) []float64 {
	return r.pctsOf(c, func(run serviceRun) float64 { return run.ceiling })
}

// pctsOf is, per run of c, its events/s as % of the reference ref gives
// that run, leaving out runs without one.
func (r *result) pctsOf(c cell, ref func(serviceRun) float64) []float64 {
	var out []float64
	for _, run := range r.runs[c] {
		if v := ref(run); v > 0 {
			out = append(out, 100*run.rate/v)
		}
	}
	return out
}

func (r *result) cpu(c cell, group string) []float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, run.cpu.groups[group])
	}
	return out
}

// publishLag is a cell's median p50 and p99 of the publish lag, in ms, and
// whether any run published.
func (r *result) publishLag(c cell) (p50, p99 float64, ok bool) {
	var a, b []float64
	for _, run := range r.runs[c] {
		if run.published > 0 {
			a = append(a, float64(run.publishP50)/float64(time.Millisecond))
			b = append(b, float64(run.publishP99)/float64(time.Millisecond))
		}
	}
	return median(a), median(b), len(b) > 0
}

// cpuPerEvent is a cell's median of billing's CPU time per event, in µs:
// each run's share of one core over its events/s.
func (r *result) cpuPerEvent(c cell) float64 {
	var out []float64
	for _, run := range r.runs[c] {
		if run.rate > 0 {
			out = append(out, run.cpu.groups["billing"]/100*1e6/run.rate)
		}
	}
	return median(out)
}

// meanMs is a cell's median of one mean duration per run, in ms.
func (r *result) meanMs(c cell, d func(serviceRun) time.Duration) float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, float64(d(run))/float64(time.Millisecond))
	}
	return median(out)
}

// poolRan is the pool c's service ran with as it reported it
// (billing_db_pool_max_connections; the largest if runs differ), or the
// pool the driver expects when the service did not report it.
func (r *result) poolRan(c cell) int {
	var pool float64
	for _, run := range r.runs[c] {
		pool = max(pool, run.pool)
	}
	if pool == 0 {
		return c.pool()
	}
	return int(pool)
}

// groupSizes is c's median mean group size per op, "reserve / settle"
// ("—" for an op no run measured: a binary without
// billing_db_group_events, or a dup cell's settle, which it never runs).
func (r *result) groupSizes(c cell) string {
	f := func(v func(serviceRun) float64) string {
		var xs []float64
		for _, run := range r.runs[c] {
			if x := v(run); x > 0 {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f", median(xs))
	}
	return f(func(s serviceRun) float64 { return s.groupReserve }) + " / " + f(func(s serviceRun) float64 { return s.groupSettle })
}

// busy is a cell's median of the mean connections in use per run.
func (r *result) busy(c cell) float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, run.meanBusy)
	}
	return median(out)
}

func (r *result) hostCPU(c cell) []float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, run.cpu.busy)
	}
	return out
}

func (r *result) steal(c cell) []float64 {
	var out []float64
	for _, run := range r.runs[c] {
		out = append(out, run.cpu.steal)
	}
	return out
}

// pgbenchSteal is the steal of every pgbench run.
func (r *result) pgbenchSteal() []float64 {
	var out []float64
	for _, ps := range r.pgbench {
		for _, p := range ps {
			out = append(out, p.steal)
		}
	}
	for _, ps := range r.grouped {
		for _, p := range ps {
			out = append(out, p.steal)
		}
	}
	return out
}

// check is one target, met or not.
type check struct {
	ok    bool
	issue string // whose target: "concurrency", "grouping", "throughput"
	text  string
}

func (r *result) checks() []check {
	var out []check
	one := median(r.rates(cell{latency: speedupLatency, inFlight: sequentialFlights}))
	many := median(r.rates(cell{latency: speedupLatency, inFlight: speedupInFlight}))
	if _, ok := r.runs[cell{latency: speedupLatency, inFlight: sequentialFlights}]; ok && one > 0 {
		if _, ok := r.runs[cell{latency: speedupLatency, inFlight: speedupInFlight}]; ok {
			x := many / one
			out = append(out, check{x >= targetSpeedup, "throughput", fmt.Sprintf(
				"at %s, in-flight %d reaches %.1f× in-flight %d (%.0f vs %.1f events/s); target ≥ %.0f×",
				fmtLatency(speedupLatency), speedupInFlight, x, sequentialFlights, many, one, targetSpeedup)})
		}
	}
	for _, c := range r.cells {
		if c.latency != 0 || c.conns > 0 {
			continue
		}
		pcts := r.ceilingPcts(c)
		if len(pcts) == 0 {
			continue
		}
		what, issue, target := fmt.Sprintf("in-flight %d", c.inFlight), "concurrency", targetCeilingPct
		switch {
		case c.dup && c.inFlight == dupInFlight:
			what, issue, target = fmt.Sprintf("an all-duplicate stream at in-flight %d", c.inFlight), "grouping", targetDupPct
		case c.dup:
			continue // no target at this in-flight
		case slices.Contains(groupedTargetInFlight, c.inFlight):
			issue, target = "grouping", targetGroupedPct
		}
		k, pct := c.clients(), median(pcts)
		// Shown to a tenth, rounded down, so that the figure never reads
		// as the target when it falls short of it (59.6% printed as "60%"
		// beside "NOT met").
		out = append(out, check{pct >= target, issue, fmt.Sprintf(
			"at 0 ms, %s reaches %.1f%% of the per-event pgbench ceiling at %d clients (median of %d runs, each to the ceiling measured just before it: %s; medians %.0f vs %.0f events/s); target ≥ %.0f%%",
			what, shownPct(pct), k, len(pcts), pctRange(pcts), median(r.rates(c)), median(r.ceiling(k)), target)})
	}
	if c := (cell{latency: 0, inFlight: speedupInFlight}); len(r.runs[c]) > 0 {
		if _, p99, ok := r.publishLag(c); ok {
			out = append(out, check{p99 < float64(targetPublishP99/time.Millisecond), "publishing", fmt.Sprintf(
				"at 0 ms, in-flight %d, invoice events are published %.0f ms after their transition at p99 (median of the runs' p99); target < %v",
				c.inFlight, p99, targetPublishP99)})
		} else {
			out = append(out, check{false, "publishing", fmt.Sprintf("at 0 ms, in-flight %d published no invoice event: no publish lag to check", c.inFlight)})
		}
	}
	for _, w := range r.cells {
		if w.conns == 0 {
			continue
		}
		// Each rep's default-pool run to the wide-pool run right after it.
		d := w.plain()
		var pcts []float64
		for i := range min(len(r.runs[d]), len(r.runs[w])) {
			if wr := r.runs[w][i].rate; wr > 0 {
				pcts = append(pcts, 100*r.runs[d][i].rate/wr)
			}
		}
		if len(pcts) == 0 {
			continue
		}
		pool, pct := r.poolRan(d), median(pcts)
		best := "the wide pool"
		if median(r.rates(d)) >= median(r.rates(w)) {
			best = "the default pool"
		}
		out = append(out, check{pool <= targetMaxConns && pct >= targetWidePct, "grouping", fmt.Sprintf(
			"at 0 ms, in-flight %d on its default pool of %d connections reaches %.1f%% of its events/s on %d (median of %d reps, each to the wide-pool run right after it: %s; medians %.0f vs %.0f events/s; the better is %s); target: a default pool of at most %d connections within %.0f%% of the better of the two (≥ %.0f%%)",
			d.inFlight, pool, shownPct(pct), w.conns, len(pcts), pctRange(pcts), median(r.rates(d)), median(r.rates(w)), best,
			targetMaxConns, 100-targetWidePct, targetWidePct)})
	}
	var peak float64
	var at string
	for _, c := range r.cells {
		for _, run := range r.runs[c] {
			if v := float64(run.hwm) / (1 << 20); v > peak {
				peak, at = v, c.String()
			}
		}
	}
	out = append(out, check{peak < targetPeakRSSMiB, "throughput", fmt.Sprintf(
		"highest peak RSS of all measured runs: %.1f MiB (%s); target < %.0f MiB", peak, at, targetPeakRSSMiB)})
	return append(out, floodChecks(r.floods)...)
}

// shownPct is pct rounded down to a tenth.
func shownPct(pct float64) float64 { return math.Floor(pct*10) / 10 }

// pctRange is the min–max of per-run ratios in whole per cents, rounded
// down like every shown ratio; the table and the Targets both use it, so
// that they give the same runs the same range.
func pctRange(pcts []float64) string {
	return fmt.Sprintf("%.0f–%.0f%%", math.Floor(slices.Min(pcts)), math.Floor(slices.Max(pcts)))
}

// markdown renders the report: how it was made, the table, the targets.
func (r *result) markdown(e *env, o options) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# billing — `make bench`\n\n")
	p("Made %s by `go -C bench run ./cmd/billbench %s` (%s in all).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.Join(o.args, " "), r.took.Round(time.Second))
	for _, f := range e.facts {
		p("- %s\n", f)
	}
	p("- service: `bin/billing run` as a child process, default configuration except `BILLING_MAX_IN_FLIGHT`; " +
		"`BILLING_DB_MAX_CONNS` is its default for that in-flight (`config.DefaultDBMaxConns`), shown as DB pool with, in brackets, the connections busy: the mean of `billing_db_pool_acquired_connections` over the measured interval (median of the runs); the gateway stub answers every charge after the latency shown\n")
	p("- each service run: a fresh topic of %d partitions, consumer group and emptied tables; the events (one per order, keyed by order id) are "+
		"produced before the service starts and sized to last about %s at the rate of a discarded calibration run; "+
		"events/s is measured between the samples where 10%% and 90%% of the events are final (`billing_events_total`, scraped every %s); "+
		"peak RSS is the process's VmHWM; every run is checked: all events charged, one gateway charge and one charged invoice each, offsets committed to the end\n",
		o.partitions, o.steady, scrapeInterval)
	if slices.ContainsFunc(r.cells, func(c cell) bool { return c.dup }) {
		p("- 0 ms, dup: an all-duplicate stream — before the service starts, every event of the run is written to the database as billed by the run's consumer group " +
			"(a dedup row with that group in the event's day partition, the order's invoice charged under the event's id with a charge id of the gateway's form: the rows the service writes, stamped as its statements stamp them so that no trigger publishes them again, then a checkpoint), " +
			"so the service consumes records it has seen, as after a rebalance or a replay; each run is checked: every outcome `duplicate`, no call at the gateway stub, no row added, offsets committed to the end; " +
			"%% of ceiling is to the per-event ceiling of its client count, as for the other cells\n")
	}
	for _, c := range r.cells {
		if c.conns > 0 {
			p("- 0 ms, wide pool: in-flight %d with `BILLING_DB_MAX_CONNS=%d` instead of its default (%d), measured right after the default-pool cell in every rep, to show what a wider pool would gain; it has no ceiling of its own\n",
				c.inFlight, c.conns, config.DefaultDBMaxConns(c.inFlight))
		}
	}
	p("- pgbench ceiling: `pgbench/reserve_settle.sql` beside this report — the reserve and settle transactions of one event as the per-event service sends them, its statements (infra/postgres/queries: reserve_one, invoices_for_update, settle_one), `-M prepared` — "+
		"for %s on emptied tables, with as many clients as the service has database connections at that in-flight (min(in-flight, pool)); its tps is events/s; it runs right before the cells of its client count in every rep, and %% of ceiling is the median of each run's events/s over the ceiling measured just before it; "+
		"it is the yardstick of the targets\n",
		o.pgbenchT)
	p("- grouped ceiling: `pgbench/reserve_settle_grouped.sql` beside this report — the grouped store's shape (reserve_prelude, reserve_group, invoices_for_update; settle_prelude, settle_group): the reserves of G events as one set-based statement and one ordered read `FOR UPDATE` in one pipeline, their settles as one `UPDATE … FROM unnest` with `synchronous_commit` off, `-M prepared` — " +
		"at the same client count, for as long, right after the per-event ceiling; G is max(1, in-flight / clients), the in-flight events per connection (a fixed rule, not the measured group size beside it); one pgbench transaction is G events, so its events/s is tps × G; %% of grouped is the median of each run's events/s over the grouped ceiling of its rep; " +
		"every pgbench run is checked: no failed transaction, and per transaction G invoices charged and G dedup rows in today's partition\n")
	p("- events per group: the mean events per group statement over the measured interval, from the service's histogram `billing_db_group_events{op}` (Δ`_sum` / Δ`_count`), median of the runs; — where the binary does not export it\n")
	p("- publish lag: quantiles of `billing_publish_lag_seconds` (an invoice's transition to the acknowledged write of its event, `BILLING_PUBLISH_EVENTS` at its default, on) over each whole run, read once every event of the run is published; median of the runs; — where nothing was published (the dup rows); billing CPU µs/event is each run's billing CPU over its events/s, median of the runs\n")
	p("- every figure is the median of %d runs (min–max in brackets); reps are interleaved across cells; ms per event are the means of `billing_handle_duration_seconds` (fetch to final outcome) and `billing_payment_duration_seconds` over the measured interval; CPU is %% of one core (the host has %d), median, over the measured interval; the driver process holds the gateway stub (served by its lean HTTP/1.1 server); steal is CPU time the hypervisor gave other guests while this one wanted it, %% of one core\n\n", o.reps, runtime.NumCPU())

	p("| gateway | in-flight | DB pool (busy) | events/s | × in-flight 1 | pgbench ceiling (clients) | %% of ceiling | grouped ceiling, events/s (G) | %% of grouped | events per group: reserve / settle | peak RSS MiB | ms per event: in flight / gateway | publish lag ms p50 / p99 | billing CPU µs/event | CPU billing / postgres / broker / driver / host (steal) |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.cells {
		rates := r.rates(c)
		rate := median(rates)
		speed := "—"
		if one := median(r.rates(cell{latency: c.latency, inFlight: sequentialFlights})); one > 0 && c.inFlight != sequentialFlights && !c.dup {
			speed = fmt.Sprintf("%.1f×", rate/one)
		}
		label := fmtLatency(c.latency)
		switch {
		case c.dup:
			label += ", dup"
		case c.conns > 0:
			label += ", wide pool"
		}
		ceil, gceil := "—", "—"
		if c.conns == 0 { // the wide-pool cell has no ceiling of its own
			k, g := r.ceiling(c.clients()), r.groupedCeiling(c)
			ceil = fmt.Sprintf("%.0f (%.0f–%.0f) (%d)", median(k), minOr0(k), maxOr0(k), c.clients())
			gceil = fmt.Sprintf("%.0f (%.0f–%.0f) (%d)", median(g), minOr0(g), maxOr0(g), c.group())
		}
		rss := r.rssMiB(c)
		lag := "—"
		if p50, p99, ok := r.publishLag(c); ok {
			lag = fmt.Sprintf("%.0f / %.0f", p50, p99)
		}
		p("| %s | %d | %d (%.1f) | %.0f (%.0f–%.0f) | %s | %s | %s | %s | %s | %s | %.1f (max %.1f) | %.1f / %.1f | %s | %.0f | %.0f%% / %.0f%% / %.0f%% / %.0f%% / %.0f%% (%.0f%%) |\n",
			label, c.inFlight, r.poolRan(c), r.busy(c),
			rate, slices.Min(rates), slices.Max(rates), speed,
			ceil, fmtPcts(r.ceilingPcts(c)), gceil, fmtPcts(r.groupedPcts(c)), r.groupSizes(c),
			median(rss), slices.Max(rss),
			r.meanMs(c, func(s serviceRun) time.Duration { return s.meanHandle }), r.meanMs(c, func(s serviceRun) time.Duration { return s.meanGateway }),
			lag, r.cpuPerEvent(c),
			median(r.cpu(c, "billing")), median(r.cpu(c, "postgres")), median(r.cpu(c, "broker")),
			median(r.cpu(c, "driver")), median(r.hostCPU(c)), median(r.steal(c)))
	}
	if st := r.pgbenchSteal(); len(st) > 0 {
		// The host's CPU use during pgbench, to set beside the host column
		// of the cells of the same client count: how much of the host
		// Postgres leaves unused at that concurrency with nothing else
		// running.
		var busy []string
		for _, k := range slices.Sorted(maps.Keys(r.pgbench)) {
			var bs []float64
			for _, pb := range r.pgbench[k] {
				bs = append(bs, pb.busy)
			}
			busy = append(busy, fmt.Sprintf("%.0f%% with %d clients", median(bs), k))
		}
		p("\npgbench runs: host CPU %s (medians, %% of one core); steal %.0f%% median (%.0f–%.0f%%).\n",
			strings.Join(busy, ", "), median(st), slices.Min(st), slices.Max(st))
	}
	if len(r.floods) > 0 {
		p("%s", floodMarkdown(r.floods, o))
	}
	p("%s", r.profileMarkdown(e))
	p("\n## Targets\n\n")
	var named []string
	for _, n := range groupedTargetInFlight {
		named = append(named, strconv.Itoa(n))
	}
	p("Each target is named for the work that set it: concurrency (events in flight at once), grouping (their database work grouped into one statement each), throughput (both), publishing (invoice events), memory (large records). Grouping's bounds replace the concurrency targets where they are the same check (at 0 ms, in-flight %s: ≥ %.0f%% of the per-event ceiling instead of ≥ %.0f%%); the other concurrency targets stay.\n\n",
		strings.Join(named, " and "), targetGroupedPct, targetCeilingPct)
	for _, ch := range r.checks() {
		mark := "met"
		if !ch.ok {
			mark = "**NOT met**"
		}
		p("- %s (%s): %s\n", mark, ch.issue, ch.text)
	}
	var problems []string
	for _, c := range r.cells {
		for _, run := range r.runs[c] {
			for _, pr := range run.problems {
				problems = append(problems, fmt.Sprintf("%s (%s): %s", run.name, c, pr))
			}
		}
	}
	for _, ps := range slices.Concat(slices.Collect(maps.Values(r.pgbench)), slices.Collect(maps.Values(r.grouped))) {
		for _, pb := range ps {
			what := fmt.Sprintf("pgbench -c %d", pb.clients)
			if pb.grouped {
				what += fmt.Sprintf(" (grouped, G %d)", pb.group)
			}
			if pb.failed > 0 {
				problems = append(problems, fmt.Sprintf("%s: %d failed transactions", what, pb.failed))
			}
			if pb.problem != "" {
				problems = append(problems, what+": "+pb.problem)
			}
		}
	}
	if r.floodFailed != "" {
		problems = append(problems, "memory lines not measured: "+r.floodFailed)
	}
	for _, f := range r.floods {
		for _, pr := range f.problems {
			problems = append(problems, fmt.Sprintf("%s (memory line, %s): %s", f.name, f.what(), pr))
		}
	}
	p("\n## Checks of every run\n\n")
	if len(problems) == 0 {
		p("No problem: every measured run charged each event once (an all-duplicate run: none again), committed its offsets to the end and exited 0 on SIGTERM; every pgbench run wrote what its transactions stand for, none failed.\n")
	}
	for _, pr := range problems {
		p("- %s\n", pr)
	}
	return b.String()
}

// fmtPcts is a table's median per-run ratio and its range, in whole per
// cents rounded down as in the Targets; "—" for none.
func fmtPcts(pcts []float64) string {
	if len(pcts) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%% (%s)", math.Floor(median(pcts)), pctRange(pcts))
}

func minOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Min(xs)
}

func maxOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}
