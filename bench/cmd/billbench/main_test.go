package main

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/pgcluster"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// pgbench 15's report, abridged.
const pgbenchOut = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: bench/reserve_settle.sql
scaling factor: 1
query mode: prepared
number of clients: 36
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 57651
number of failed transactions: 3 (0.005%)
latency average = 6.245 ms
initial connection time = 41.221 ms
tps = 5765.143811 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	p, err := parsePgbench(pgbenchOut)
	if err != nil {
		t.Fatal(err)
	}
	if p.tps != 5765.143811 || p.latency != 6.245 || p.failed != 3 {
		t.Errorf("parsePgbench() = %+v, want tps 5765.143811, latency 6.245, failed 3", p)
	}
	if _, err := parsePgbench("pgbench: error: connection refused\n"); err == nil {
		t.Error("parsePgbench(error output) error = nil, want one")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestHistogramQuantile interpolates within the bucket that holds the
// quantile, as Prometheus's histogram_quantile does.
func TestHistogramQuantile(t *testing.T) {
	series := map[string]float64{
		publishBucket + `0.01"}`: 50, publishBucket + `0.1"}`: 90, publishBucket + `1"}`: 100, publishBucket + `+Inf"}`: 100,
		"billing_publish_lag_seconds_count": 100,
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 10 * time.Millisecond},   // the end of the first bucket
		{0.7, 55 * time.Millisecond},   // halfway through 10–100 ms
		{0.99, 910 * time.Millisecond}, // nine tenths through 100 ms–1 s
	} {
		if got := histogramQuantile(tc.q, series); got.Round(time.Millisecond) != tc.want {
			t.Errorf("histogramQuantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := histogramQuantile(0.99, map[string]float64{}); got != 0 {
		t.Errorf("histogramQuantile(no buckets) = %v, want 0", got)
	}
}

// TestChecks: the targets are computed from medians (a ceiling ratio from
// each run's ratio to its own ceiling, the pool comparison from each rep's
// pair of runs), grouping's bound replaces concurrency's where both check the
// same, and a miss says so.
func TestChecks(t *testing.T) {
	run := func(rate float64, rssMiB int64) serviceRun { return serviceRun{rate: rate, hwm: rssMiB << 20} }
	paired := func(rate, ceiling float64) serviceRun { return serviceRun{rate: rate, hwm: 40 << 20, ceiling: ceiling} }
	pooled := func(rate, pool float64) serviceRun { return serviceRun{rate: rate, hwm: 40 << 20, pool: pool} }
	one, many := cell{latency: 20 * time.Millisecond, inFlight: 1}, cell{latency: 20 * time.Millisecond, inFlight: 64}
	zero, zero256, zero1 := cell{inFlight: 64}, cell{inFlight: 256}, cell{inFlight: 1}
	dup, dup16, wide := cell{inFlight: 64, dup: true}, cell{inFlight: 16, dup: true}, cell{inFlight: 256, conns: 32}
	zero16 := cell{inFlight: 16}
	r := &result{
		cells: []cell{one, many, zero, dup, zero256, wide, zero1, zero16, dup16},
		runs: map[cell][]serviceRun{
			one:  {run(40, 30), run(45, 30), run(50, 30)},
			many: {run(2000, 40), run(1000, 40), run(1900, 120)}, // median 1900: 42×
			// Ratios 25%, 50%, 75%: median 50%, though the medians of
			// rates and ceilings (2000 vs 4000) also give 50%.
			zero: {paired(1000, 4000), paired(3000, 4000), paired(2000, 4000)},
			// (their publish lag is set below)
			// 310%, 290%, 320%: median 310%.
			dup: {paired(12400, 4000), paired(11600, 4000), paired(12800, 4000)},
			// Ratios 105%, 100%, 95%: median 100%, where the medians of its
			// rates and ceilings (4000 vs 4000) would give 100% too; the run
			// without a ceiling is left out. The service reported a pool of 8.
			zero256: {{rate: 4200, ceiling: 4000, pool: 8}, {rate: 5000, ceiling: 5000, pool: 8}, {rate: 3800, ceiling: 4000, pool: 8}, run(100, 40)},
			// Per rep 4200/4500, 5000/5000, 3800/4500: 93%, 100%, 84%:
			// median 93%, though its medians (4000 vs 4500) give 88.9%.
			wide: {pooled(4500, 32), pooled(5000, 32), pooled(4500, 32)},
			// 59.96%: short of the concurrency target, so it must not read as 60%.
			zero1: {paired(1499, 2500)},
			// Concurrency's 60% still holds at an in-flight grouping names no bound for.
			zero16: {paired(3000, 4000)},
			dup16:  {paired(9000, 4000)}, // no target: not a line
		},
		pgbench: map[int][]pgbenchRun{cell{inFlight: 64}.clients(): {{tps: 4000}, {tps: 3000}, {tps: 5000}}},
	}
	// Publish lag p99 of the in-flight 64 runs: 300, 1200, 800 ms: median
	// 800 ms, under the publishing target's second.
	for i, p99 := range []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond, 800 * time.Millisecond} {
		r.runs[zero][i].published, r.runs[zero][i].publishP50, r.runs[zero][i].publishP99 = 100, 10*time.Millisecond, p99
	}
	got := r.checks()
	want := []struct {
		ok    bool
		issue string
		text  string
	}{
		{true, "throughput", "42.2×"},
		{false, "grouping", "in-flight 64 reaches 50.0% of the per-event pgbench ceiling at " + strconv.Itoa(zero.clients()) + " clients (median of 3 runs, each to the ceiling measured just before it: 25–75%"},
		{true, "grouping", "an all-duplicate stream at in-flight 64 reaches 310.0% of the per-event pgbench ceiling"},
		{true, "grouping", "in-flight 256 reaches 100.0% of the per-event pgbench ceiling at " + strconv.Itoa(zero256.clients()) + " clients (median of 3 runs, each to the ceiling measured just before it: 95–105%"},
		{false, "concurrency", "in-flight 1 reaches 59.9% of the per-event pgbench ceiling at 1 clients (median of 1 runs"},
		{true, "concurrency", "in-flight 16 reaches 75.0%"},
		{true, "publishing", "at 0 ms, in-flight 64, invoice events are published 800 ms after their transition at p99"},
		{true, "grouping", "in-flight 256 on its default pool of 8 connections reaches 93.3% of its events/s on 32 (median of 3 reps, each to the wide-pool run right after it: 84–100%; medians 4000 vs 4500 events/s; the better is the wide pool)"},
		{false, "throughput", "120.0 MiB"},
	}
	if len(got) != len(want) {
		t.Fatalf("checks() = %+v, want %d", got, len(want))
	}
	for i, w := range want {
		if got[i].ok != w.ok || got[i].issue != w.issue || !strings.Contains(got[i].text, w.text) {
			t.Errorf("check %d = %+v, want ok=%v, %s and %q in it", i, got[i], w.ok, w.issue, w.text)
		}
	}

	// A default pool above grouping's bound misses, however fast.
	r.runs[zero256] = []serviceRun{pooled(5000, 64)}
	r.runs[wide] = []serviceRun{pooled(4000, 32)}
	for _, ch := range r.checks() {
		if strings.Contains(ch.text, "default pool of 64 connections") {
			if ch.ok {
				t.Errorf("check %+v: met with a pool of 64, want not met", ch)
			}
			return
		}
	}
	t.Error("no pool check with the pool of 64")
}

// TestSmoke runs the whole driver once, small: the built service against
// a throwaway Postgres, the in-process broker and pgbench (about 15 s). It
// needs the Postgres server binaries (scripts/deps.sh), so it runs with
// BILLING_E2E=1, as `make test` sets it. Its runs are so short that every
// event can be final before the first scrape, which once made calibration
// loop on empty runs until the test's deadline.
func TestSmoke(t *testing.T) {
	if !needs.E2E() {
		t.Skip("BILLING_E2E=1 runs the benchmark driver end to end")
	}
	dir := t.TempDir()
	// `make test-bench` passes bin/billing (BILLING_BIN), built once for
	// this and the e2e module; a bare go test builds its own.
	bin := os.Getenv("BILLING_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "billing")
		// Built in the service's module (the repository root), as make build does.
		build := exec.Command("go", "build", "-o", bin, "./cmd/billing")
		build.Dir = "../../.."
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	} else if abs, err := filepath.Abs(bin); err != nil {
		t.Fatal(err)
	} else {
		bin = abs
	}
	report := filepath.Join(dir, "out", "report.md")
	// No deadline of its own: on a busy machine the run takes many times
	// its quiet length (once more than 5 minutes, which failed it), so the
	// driver's waits fail only when its counts stop moving, and go test's
	// -timeout bounds the whole.
	ctx := t.Context()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err := run(ctx, []string{"-bin", bin, "-root", "../../..", "-out", report, "-reps", "1",
		"-latencies", "0ms", "-inflight", "2", "-steady", "1s", "-pgbench-time", "1s", "-broker", "kfake",
		"-dup", "2", "-wide-conns", "3", "-wide-inflight", "2"}, log)
	if err != nil {
		t.Fatalf("billbench: %v", err)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	// The row of the one cell, with the pool the service ran with
	// (config_test pins the values of DefaultDBMaxConns).
	row := fmt.Sprintf("| 0 ms | 2 | %d (", config.DefaultDBMaxConns(2))
	// The all-duplicate cell and the wide-pool cell, with the pool they ran
	// with as the service reported it; the wide one has no ceiling.
	dup := fmt.Sprintf("| 0 ms, dup | 2 | %d (", config.DefaultDBMaxConns(2))
	wide := "| 0 ms, wide pool | 2 | 3 ("
	for _, want := range []string{row, dup, wide, "| — | — | — | — |", "every outcome `duplicate`", "replace the concurrency targets where they are the same check", "(concurrency): at 0 ms, in-flight 2 reaches", "(throughput): highest peak RSS", "(grouping): at 0 ms, in-flight 2 on its default pool of ", "pgbench ceiling", "grouped ceiling, events/s (G)", "each to the ceiling measured just before it", "host (steal)", "pgbench runs: host CPU ", fmt.Sprintf("%% with %d clients (medians, %% of one core); steal", cell{latency: 0, inFlight: 2}.clients()), "NOT the real broker", "No problem: every measured run", "## Peak RSS with large records", "(memory): peak RSS with 160 records of "} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

func TestRuntimeEnv(t *testing.T) {
	got, err := runtimeEnv(deploymentPath("../../.."))
	if err != nil {
		t.Fatal(err)
	}
	// deploy/base/deployment.yaml: GOMEMLIMIT about 90% of limits.memory
	// 256Mi, a literal, and GOGC.
	want := map[string]string{"GOMEMLIMIT": "230MiB", "GOGC": "200"}
	if !maps.Equal(got, want) {
		t.Errorf("runtimeEnv = %v, want %v", got, want)
	}

	dir := t.TempDir()
	manifest := func(cpu string) string {
		p := filepath.Join(dir, cpu+".yaml")
		doc := `apiVersion: apps/v1
kind: Deployment
metadata: {name: billing}
spec:
  template:
    spec:
      containers:
        - name: billing
          env:
            - name: GOMAXPROCS
              valueFrom: {resourceFieldRef: {resource: limits.cpu}}
          resources: {limits: {cpu: "` + cpu + `"}}
`
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for cpu, want := range map[string]string{"250m": "1", "1500m": "2", "4": "4"} {
		got, err := runtimeEnv(manifest(cpu))
		if err != nil || got["GOMAXPROCS"] != want {
			t.Errorf("limits.cpu %s: GOMAXPROCS %q (%v), want %s", cpu, got["GOMAXPROCS"], err, want)
		}
	}
}

// TestPgbenchScripts runs both ceiling scripts, as built from the store's
// statements, briefly against a freshly migrated cluster, through
// runPgbench: each must run without a failed
// transaction and write exactly what its transactions stand for (per
// transaction one event, or G, billed: an invoice charged and a dedup row in
// today's partition each).
func TestPgbenchScripts(t *testing.T) {
	t.Parallel()
	binDir, err := pgcluster.FindBinDir()
	if err != nil {
		t.Skipf("no Postgres server binaries: %v", err)
	}
	pgbench := filepath.Join(binDir, "pgbench")
	if _, err := os.Stat(pgbench); err != nil {
		t.Skipf("no pgbench beside the server (%s): scripts/deps.sh installs it", pgbench)
	}
	c, _ := pgtest.NewMigratedCluster(t)
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{root: root, dsn: c.DSN("postgres"), pgbench: pgbench, outDir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(e.outDir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if e.perEventScript, e.groupedScript, err = writePgbenchScripts(e.outDir); err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions([]string{"-pgbench-time", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, tc := range []struct{ clients, g int }{{2, 0}, {2, 1}, {3, 7}} {
		p, err := runPgbench(pgtest.Context(t), e, o, tc.clients, tc.g, log)
		if err != nil {
			t.Fatalf("runPgbench(%d clients, g %d): %v", tc.clients, tc.g, err)
		}
		if p.failed != 0 || p.processed == 0 || p.problem != "" {
			t.Errorf("runPgbench(%d clients, g %d) = %+v, want transactions, none failed, no problem", tc.clients, tc.g, p)
		}
		if want := max(tc.g, 1); p.group != want || p.events() != p.tps*float64(want) {
			t.Errorf("runPgbench(%d clients, g %d): group %d, events/s %v, want group %d and tps × it", tc.clients, tc.g, p.group, p.events(), want)
		}
	}
}

// TestScrapeGroupSizes: the group histogram's labelled sums and counts are
// read beside the outcomes, and a cell shows their medians, or "—" where
// the binary exported none (today's) or an op never ran.
func TestScrapeGroupSizes(t *testing.T) {
	t.Parallel()
	const page = `# TYPE billing_events_total counter
billing_events_total{outcome="charged"} 90
billing_events_total{outcome="duplicate"} 10
billing_db_pool_max_connections 8
billing_db_group_events_bucket{op="reserve",le="8"} 10
billing_db_group_events_sum{op="reserve"} 750
billing_db_group_events_count{op="reserve"} 100
billing_db_group_events_sum{op="settle"} 90
billing_db_group_events_count{op="settle"} 30
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	series := map[string]float64{}
	out, err := scrapeOutcomes(t.Context(), srv.Client(), srv.URL, series)
	if err != nil {
		t.Fatal(err)
	}
	if out["charged"] != 90 || out["duplicate"] != 10 {
		t.Errorf("outcomes = %v, want 90 charged, 10 duplicate", out)
	}
	want := map[string]float64{poolSeries: 8,
		groupSeries("reserve", "sum"): 750, groupSeries("reserve", "count"): 100,
		groupSeries("settle", "sum"): 90, groupSeries("settle", "count"): 30}
	if !maps.Equal(series, want) {
		t.Errorf("series = %v, want %v", series, want)
	}

	c, d, old := cell{inFlight: 64}, cell{inFlight: 64, dup: true}, cell{inFlight: 256}
	r := &result{runs: map[cell][]serviceRun{
		c:   {{groupReserve: 7.5, groupSettle: 3}, {groupReserve: 6, groupSettle: 4}, {groupReserve: 8, groupSettle: 5}},
		d:   {{groupReserve: 8}},
		old: {{}, {}},
	}}
	for cl, want := range map[cell]string{c: "7.5 / 4.0", d: "8.0 / —", old: "— / —"} {
		if got := r.groupSizes(cl); got != want {
			t.Errorf("groupSizes(%s) = %q, want %q", cl, got, want)
		}
	}
}
