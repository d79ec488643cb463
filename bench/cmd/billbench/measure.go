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

	"github.com/jackc/pgx/v5"
	kafkago "github.com/segmentio/kafka-go"
)

// result is everything one billbench run measured.
type result struct {
	cells   []cell
	runs    map[cell][]serviceRun     // the measured runs, reps per cell
	pgbench map[int][]pgbenchRun      // per-event script, by client count
	grouped map[groupKey][]pgbenchRun // grouped script, by client count and group size
	floods  []floodRun                // the memory lines
	// profiles are each cell's, from a run of its own after the measured
	// ones (-profile).
	profiles map[cell]cellProfile
	// floodFailed is why the memory lines could not be measured ("" when
	// they were, or were not asked for).
	floodFailed string
	took        time.Duration
}

// groupKey names a grouped ceiling: clients × events per transaction.
type groupKey struct{ clients, g int }

// pgbenchRun is one pgbench ceiling run.
type pgbenchRun struct {
	clients   int
	grouped   bool    // the grouped script, not the per-event one
	group     int     // events per script run: 1 for the per-event script, G for the grouped one
	tps       float64 // script runs per second, without connection time
	latency   float64 // average ms per script run
	processed int     // script runs that completed
	failed    int
	steal     float64 // % of one CPU the hypervisor took during the run
	busy      float64 // % of one CPU the host was busy (not idle or iowait)
	problem   string  // what the run wrote differs from what it should have ("" when not)
}

// events is the run's ceiling in events/s.
func (p pgbenchRun) events() float64 { return p.tps * float64(max(p.group, 1)) }

// Event counts: the calibration run of a cell is small and discarded (it
// warms the JIT of the broker and Postgres's caches and sizes the measured
// runs); a measured run is sized to last o.steady at the calibrated rate.
const (
	calibrationEvents = 300
	maxCalibrations   = 5
	minEvents         = 300
	maxEvents         = 200_000
)

// cells are the cells of o in the order of the table (and of the runs
// within a client count): each latency's in-flight values, at 0 ms each
// followed by its all-duplicate cell and its wide-pool cell if asked for;
// those asked for at an in-flight that -inflight lacks come last.
func cells(o options) []cell {
	var out []cell
	for _, l := range o.latencies {
		for _, n := range o.inFlight {
			out = append(out, cell{latency: l, inFlight: n})
			if l != 0 {
				continue
			}
			if slices.Contains(o.dup, n) {
				out = append(out, cell{inFlight: n, dup: true})
			}
			if o.wideConns > 0 && n == o.wideFlight {
				out = append(out, cell{inFlight: n, conns: o.wideConns})
			}
		}
	}
	for _, n := range o.dup {
		if c := (cell{inFlight: n, dup: true}); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	if c := (cell{inFlight: o.wideFlight, conns: o.wideConns}); o.wideConns > 0 && !slices.Contains(out, c) {
		out = append(out, c)
	}
	return out
}

func measure(ctx context.Context, e *env, o options, log *slog.Logger) (*result, error) {
	res := &result{runs: map[cell][]serviceRun{}, pgbench: map[int][]pgbenchRun{}, grouped: map[groupKey][]pgbenchRun{}}
	res.cells = cells(o)
	if len(o.only) > 0 {
		res.cells = slices.DeleteFunc(res.cells, func(c cell) bool { return !slices.Contains(o.only, cellName(c)) })
		if len(res.cells) == 0 {
			return nil, fmt.Errorf("-cells %s: no such cell among %v", strings.Join(o.only, ","), allCellNames(o))
		}
	}
	// The client counts of the ceilings, and per count the group sizes of
	// its grouped ceilings, in the order of the cells.
	var clients []int
	groups := map[int][]int{}
	for _, c := range res.cells {
		if c.conns > 0 {
			continue // no ceiling of its own
		}
		k := c.clients()
		if !slices.Contains(clients, k) {
			clients = append(clients, k)
		}
		if !slices.Contains(groups[k], c.group()) {
			groups[k] = append(groups[k], c.group())
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
			r, err := runService(ctx, e, o, c, name(c, "cal"), n, rate, nil, log)
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
	runCell := func(c cell, rep int, ceiling, grouped float64) error {
		n := min(max(int(expect[c]*o.steady.Seconds()), minEvents), maxEvents)
		r, err := runService(ctx, e, o, c, name(c, "r"+strconv.Itoa(rep)), n, max(expect[c]/2, 1), nil, log)
		if err != nil {
			return fmt.Errorf("%s rep %d: %w", c, rep, err)
		}
		e.deleteTopics(ctx, r.name, log)
		r.ceiling, r.grouped = ceiling, grouped
		res.runs[c] = append(res.runs[c], r)
		expect[c] = median(res.rates(c))
		return nil
	}
	for rep := 1; rep <= o.reps; rep++ {
		ran := map[cell]bool{}
		for _, k := range clients {
			p, err := runPgbench(ctx, e, o, k, 0, log)
			if err != nil {
				return nil, err
			}
			res.pgbench[k] = append(res.pgbench[k], p)
			grouped := map[int]float64{}
			for _, g := range groups[k] {
				q, err := runPgbench(ctx, e, o, k, g, log)
				if err != nil {
					return nil, err
				}
				res.grouped[groupKey{k, g}] = append(res.grouped[groupKey{k, g}], q)
				grouped[g] = q.events()
			}
			for _, c := range res.cells {
				if c.conns > 0 || c.clients() != k {
					continue
				}
				if err := runCell(c, rep, p.tps, grouped[c.group()]); err != nil {
					return nil, err
				}
				ran[c] = true
				// A wide-pool cell right after its twin, so that the
				// machine's speed is about the same for both sides of
				// their comparison.
				for _, w := range res.cells {
					if w.conns > 0 && w.plain() == c {
						if err := runCell(w, rep, 0, 0); err != nil {
							return nil, err
						}
						ran[w] = true
					}
				}
			}
		}
		for _, w := range res.cells { // a wide-pool cell whose twin is not measured
			if !ran[w] {
				if err := runCell(w, rep, 0, 0); err != nil {
					return nil, err
				}
			}
		}
	}
	if o.profile {
		if err := profileCells(ctx, e, o, res, log); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// cellName is c as -cells names it: c.String() without spaces (0ms/64,
// 0ms/dup/64, 0ms/256/32conns).
func cellName(c cell) string { return strings.ReplaceAll(c.String(), " ", "") }

// allCellNames are the names of the cells o's other flags make.
func allCellNames(o options) []string {
	var out []string
	for _, c := range cells(o) {
		out = append(out, cellName(c))
	}
	return out
}

// deleteTopics removes a finished run's topics (main, retry tiers, DLQ), so
// that the broker does not accumulate hundreds of partitions over the
// report. A failure is only logged: it costs the broker, not the figures.
func (e *env) deleteTopics(ctx context.Context, topic string, log *slog.Logger) {
	cl, done := e.client()
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
	pgbenchTPS       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	pgbenchLatency   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	pgbenchFailed    = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
	pgbenchProcessed = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
)

// runPgbench measures the database's ceiling with clients connections, on
// emptied tables: for one event's transactions (e.perEventScript) when g
// is 0, for a group of g events' (e.groupedScript) otherwise. Afterwards it counts what the script wrote, so that a script
// that stopped billing (a statement that matches nothing) shows up as a
// problem rather than as a fast ceiling.
func runPgbench(ctx context.Context, e *env, o options, clients, g int, log *slog.Logger) (pgbenchRun, error) {
	if err := e.truncate(ctx); err != nil {
		return pgbenchRun{}, err
	}
	what, script := fmt.Sprintf("pgbench -c %d", clients), e.perEventScript
	args := []string{
		"-n", // no vacuum of pgbench's own tables: there are none
		"-M", "prepared",
		"-c", strconv.Itoa(clients),
		"-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(max(int(o.pgbenchT.Seconds()), 1)),
		// The event ids are UUIDv7-shaped: this millisecond in the first 48
		// bits, so they land in today's partition of processed_event like
		// the service's.
		"-D", "ms=" + strconv.FormatInt(time.Now().UnixMilli(), 10),
	}
	if g > 0 {
		what, script = fmt.Sprintf("%s -D g=%d", what, g), e.groupedScript
		args = append(args, "-D", "g="+strconv.Itoa(g))
	}
	args = append(args, "-f", script, e.dsn)
	cmd := exec.CommandContext(ctx, e.pgbench, args...)
	before := takeHostSnap()
	out, err := cmd.CombinedOutput()
	host := share(before, takeHostSnap())
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("%s: %w\n%s", what, err, out)
	}
	p, err := parsePgbench(string(out))
	if err != nil {
		return p, fmt.Errorf("%s: %w\n%s", what, err, out)
	}
	p.clients, p.grouped, p.group, p.steal, p.busy = clients, g > 0, max(g, 1), host.steal, host.busy
	if p.problem, err = e.checkPgbenchRows(ctx, p); err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	name := fmt.Sprintf("pgbench-c%d-g%d-%d.log", clients, g, time.Now().UnixNano())
	_ = os.WriteFile(filepath.Join(e.outDir, "logs", name), out, 0o644)
	log.Info("pgbench", slog.Int("clients", clients), slog.Int("group", g), slog.Float64("tps", round1(p.tps)),
		slog.Float64("events_per_s", round1(p.events())), slog.Float64("latency_ms", p.latency), slog.Int("failed", p.failed))
	if p.problem != "" {
		log.Warn("pgbench run suspect", slog.String("what", what), slog.String("problem", p.problem))
	}
	return p, nil
}

// checkPgbenchRows compares what a pgbench run wrote with what its
// transactions should have: per transaction, group invoices charged and as
// many dedup rows, all in a day partition. It returns "" when they agree.
func (e *env) checkPgbenchRows(ctx context.Context, p pgbenchRun) (string, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return "", fmt.Errorf("connect postgres: %w", err)
	}
	defer conn.Close(ctx)
	var invoices, charged, dedup, outside int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM invoice), (SELECT count(*) FROM invoice WHERE status = 'charged'),
		(SELECT count(*) FROM processed_event), (SELECT count(*) FROM processed_event_default)`).Scan(&invoices, &charged, &dedup, &outside); err != nil {
		return "", fmt.Errorf("count pgbench rows: %w", err)
	}
	if want := p.processed * p.group; invoices != want || charged != want || dedup != want || outside != 0 {
		return fmt.Sprintf("%d transactions of %d events wrote %d invoices (%d charged) and %d dedup rows (%d outside a day partition), want %d of each and none outside",
			p.processed, p.group, invoices, charged, dedup, outside, want), nil
	}
	return "", nil
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
	if m := pgbenchProcessed.FindStringSubmatch(out); m != nil {
		p.processed, _ = strconv.Atoi(m[1])
	}
	return p, nil
}
