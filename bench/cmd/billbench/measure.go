package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/config"
)

// result is everything one billbench run measured.
type result struct {
	cells   []cell
	runs    map[cell][]serviceRun // the measured runs, reps per cell
	pgbench map[int][]pgbenchRun  // by client count
	took    time.Duration
}

// pgbenchRun is one pgbench ceiling run.
type pgbenchRun struct {
	clients int
	tps     float64 // script runs (= events) per second, without connection time
	latency float64 // average ms per script run
	failed  int
	steal   float64 // % of one CPU the hypervisor took during the run
	busy    float64 // % of one CPU the host was busy (not idle or iowait)
}

// Event counts: the calibration run of a cell is small and discarded (it
// warms the JIT of the broker and Postgres's caches and sizes the measured
// runs); a measured run is sized to last o.steady at the calibrated rate.
const (
	calibrationEvents = 300
	maxCalibrations   = 5
	minEvents         = 300
	maxEvents         = 200_000
)

// dbClients is the database concurrency of the service at inFlight: the
// pool it sizes by default, or fewer when fewer events can be in flight.
// pgbench runs with as many clients, so both press Postgres equally hard.
func dbClients(inFlight int) int { return min(inFlight, config.DefaultDBMaxConns(inFlight)) }

func measure(ctx context.Context, e *env, o options, log *slog.Logger) (*result, error) {
	res := &result{runs: map[cell][]serviceRun{}, pgbench: map[int][]pgbenchRun{}}
	for _, l := range o.latencies {
		for _, n := range o.inFlight {
			res.cells = append(res.cells, cell{latency: l, inFlight: n})
		}
	}
	var clients []int
	for _, n := range o.inFlight {
		if c := dbClients(n); !slices.Contains(clients, c) {
			clients = append(clients, c)
		}
	}

	seq := 0
	name := func(c cell, what string) string {
		seq++
		return fmt.Sprintf("bench-%03d-%dms-if%d-%s", seq, c.latency.Milliseconds(), c.inFlight, what)
	}
	expect := map[cell]float64{}
	for _, c := range res.cells {
		// A short run underrates a fast cell (the first fetches and
		// connections weigh in it), so calibrate until a run lasts at
		// least a third of the steady state aimed at.
		n, rate, measured := calibrationEvents, 20.0, false
		for try := 1; ; try++ {
			r, err := runService(ctx, e, o, c, name(c, "cal"), n, rate, log)
			if err != nil {
				return nil, fmt.Errorf("calibrate %s: %w", c, err)
			}
			e.deleteTopics(ctx, r.name, log)
			if r.rate > 0 {
				rate, measured = r.rate, true
			}
			if (measured && r.steady >= o.steady/3) || n >= maxEvents || try == maxCalibrations {
				break
			}
			// Too short to measure well, or at all (every event final
			// before the first scrape): more events, at least twice as many.
			n = min(max(2*n, int(rate*o.steady.Seconds()/2)), maxEvents)
		}
		if !measured { // every run too fast to see: assume the last took a second
			rate = float64(n)
		}
		expect[c] = rate
	}
	// Reps are interleaved (every pgbench ceiling and every cell once, then
	// again), so that a slow minute of the machine spreads over all figures
	// instead of spoiling one. Within a rep each ceiling is measured right
	// before the cells run at its client count, and a run's ratio is taken
	// to that ceiling: the machine's speed, which drifts by tens of per cent
	// over minutes here, is then about the same for both sides of a ratio.
	for rep := 1; rep <= o.reps; rep++ {
		for _, k := range clients {
			p, err := runPgbench(ctx, e, o, k, log)
			if err != nil {
				return nil, err
			}
			res.pgbench[k] = append(res.pgbench[k], p)
			for _, c := range res.cells {
				if dbClients(c.inFlight) != k {
					continue
				}
				n := min(max(int(expect[c]*o.steady.Seconds()), minEvents), maxEvents)
				r, err := runService(ctx, e, o, c, name(c, "r"+strconv.Itoa(rep)), n, max(expect[c]/2, 1), log)
				if err != nil {
					return nil, fmt.Errorf("%s rep %d: %w", c, rep, err)
				}
				e.deleteTopics(ctx, r.name, log)
				r.ceiling = p.tps
				res.runs[c] = append(res.runs[c], r)
				expect[c] = median(res.rates(c))
			}
		}
	}
	return res, nil
}

// deleteTopics removes a finished run's topics (main, retry tiers, DLQ), so
// that the broker does not accumulate hundreds of partitions over the
// report. A failure is only logged: it costs the broker, not the figures.
func (e *env) deleteTopics(ctx context.Context, topic string, log *slog.Logger) {
	cl, done := e.kc.Client()
	defer done()
	topics := []string{topic, topic + ".dlq"}
	for i := 1; i <= 3; i++ {
		topics = append(topics, topic+".retry."+strconv.Itoa(i))
	}
	resp, err := cl.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: topics})
	if err != nil {
		log.Warn("delete topics", slog.String("topic", topic), slog.String("error", err.Error()))
		return
	}
	for t, err := range resp.Errors {
		if err != nil && !strings.Contains(err.Error(), "Unknown Topic") {
			log.Warn("delete topic", slog.String("topic", t), slog.String("error", err.Error()))
		}
	}
}

var (
	pgbenchTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	pgbenchFailed  = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// runPgbench measures the database's ceiling for one event's transactions
// (bench/reserve_settle.sql) with clients connections, on emptied tables.
func runPgbench(ctx context.Context, e *env, o options, clients int, log *slog.Logger) (pgbenchRun, error) {
	if err := e.truncate(ctx); err != nil {
		return pgbenchRun{}, err
	}
	script := filepath.Join(e.root, o.pgbenchSQL)
	args := []string{
		"-n", // no vacuum of pgbench's own tables: there are none
		"-M", "prepared",
		"-f", script,
		"-c", strconv.Itoa(clients),
		"-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(int(o.pgbenchT.Seconds())),
		// The event ids are UUIDv7-shaped: this millisecond in the first 48
		// bits, so they land in today's partition of processed_event like
		// the service's.
		"-D", "ms=" + strconv.FormatInt(time.Now().UnixMilli(), 10),
		e.dsn,
	}
	cmd := exec.CommandContext(ctx, e.pgbench, args...)
	before := takeHostSnap()
	out, err := cmd.CombinedOutput()
	host := share(before, takeHostSnap())
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench -c %d: %w\n%s", clients, err, out)
	}
	p, err := parsePgbench(string(out))
	if err != nil {
		return p, fmt.Errorf("pgbench -c %d: %w\n%s", clients, err, out)
	}
	p.clients, p.steal, p.busy = clients, host.steal, host.busy
	_ = os.WriteFile(filepath.Join(e.outDir, "logs", fmt.Sprintf("pgbench-c%d-%d.log", clients, time.Now().UnixNano())), out, 0o644)
	log.Info("pgbench", slog.Int("clients", clients), slog.Float64("tps", round1(p.tps)), slog.Float64("latency_ms", p.latency), slog.Int("failed", p.failed))
	return p, nil
}

// parsePgbench reads tps, average latency and failures from pgbench's
// report (PostgreSQL 15 and later print the failure line).
func parsePgbench(out string) (pgbenchRun, error) {
	var p pgbenchRun
	m := pgbenchTPS.FindStringSubmatch(out)
	if m == nil {
		return p, fmt.Errorf("no tps line in pgbench output")
	}
	var err error
	if p.tps, err = strconv.ParseFloat(m[1], 64); err != nil {
		return p, fmt.Errorf("tps %q: %w", m[1], err)
	}
	if m := pgbenchLatency.FindStringSubmatch(out); m != nil {
		p.latency, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := pgbenchFailed.FindStringSubmatch(out); m != nil {
		p.failed, _ = strconv.Atoi(m[1])
	}
	return p, nil
}
