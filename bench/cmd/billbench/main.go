// Command billbench is the driver of `make bench` (scripts/bench.sh): it
// measures the built binary bin/billing against a real Postgres (fsync and
// synchronous_commit on), a real Kafka broker (scripts/kafka.sh; kfake only
// when the broker jars are missing, and the report says so) and the stub
// payment gateway at each gateway latency, for each BILLING_MAX_IN_FLIGHT,
// and compares it with the ceiling pgbench reaches for the same transaction
// shape (the store's own statements, infra/postgres/queries) at the same
// concurrency, in the same run.
//
// Each service run gets a fresh topic, consumer group and emptied tables;
// its events are produced before the service starts. Events/s is measured
// from the first final outcome to the last, by scraping the child's
// billing_events_total; peak RSS is the child's VmHWM. Every cell is run
// -reps times and reported as the median (and min–max). The report, a
// Markdown table and the target checks, goes to stdout and to -out.
//
// This is a benchmark: it reports numbers and target checks, it asserts no
// timing; it exits non-zero only when it could not measure.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err := run(ctx, os.Args[1:], log)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "billbench:", err)
		os.Exit(1)
	}
}

// options are the command line flags.
type options struct {
	bin        string
	root       string
	out        string
	reps       int
	latencies  []time.Duration
	inFlight   []int
	dup        []int // in-flight of the all-duplicate cells, at 0 ms
	wideConns  int   // pool of the wide-pool cell (0: none)
	wideFlight int   // its in-flight, at 0 ms
	partitions int
	steady     time.Duration
	pgbenchT   time.Duration
	broker     string   // auto, real, kfake
	args       []string // as given, for the report
	cpuProfile string
	flood      int      // records of each memory line (0: none)
	floodOnly  bool     // only the memory lines
	only       []string // -cells: the cells to run, by cellName (none: every cell)
	profile    bool     // profile each cell in a run of its own
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("billbench", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "bin/billing", "the billing binary to measure")
	fs.StringVar(&o.root, "root", ".", "repository root (scripts/kafka.sh, deploy/)")
	fs.StringVar(&o.out, "out", "bench/out/report.md", "where to write the report")
	fs.IntVar(&o.reps, "reps", 5, "runs per cell; the report shows the median")
	lat := fs.String("latencies", "0ms,20ms", "gateway stub latencies")
	inf := fs.String("inflight", "1,64,256", "BILLING_MAX_IN_FLIGHT values")
	dup := fs.String("dup", "64", "in-flight values of the all-duplicate cells (0 ms; every event billed before by the run's group, seeded in the database); empty for none")
	fs.IntVar(&o.wideConns, "wide-conns", 32, "BILLING_DB_MAX_CONNS of the wide-pool cell, measured right after its default-pool twin to compare the two; 0 for none")
	fs.IntVar(&o.wideFlight, "wide-inflight", 256, "BILLING_MAX_IN_FLIGHT of the wide-pool cell (0 ms)")
	fs.IntVar(&o.partitions, "partitions", 8, "partitions of each run's topic")
	fs.DurationVar(&o.steady, "steady", 6*time.Second, "steady state each service run aims at (events are sized from the rate measured so far)")
	fs.DurationVar(&o.pgbenchT, "pgbench-time", 6*time.Second, "pgbench -T of each ceiling run (per-event and grouped)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the driver's own CPU profile (the gateway stub runs in it) to this file")
	fs.IntVar(&o.flood, "flood", 160, "records of each memory line (peak RSS at in-flight 64 with ~900 KB events made of empty headers, and of a padded value); 0 for none")
	fs.BoolVar(&o.floodOnly, "flood-only", false, "measure only the memory lines (no throughput cell, no pgbench)")
	only := fs.String("cells", "", "run only these cells of the others flags' grid, comma-separated, named as in the report without spaces: 0ms/64, 20ms/256, 0ms/dup/64, 0ms/256/32conns; empty for all")
	fs.BoolVar(&o.profile, "profile", true, "after the measured runs, run each cell once more with BILLING_PPROF on and keep its CPU and allocation profiles beside the report (profiles/), summarised per stage; the figures of the table come from the runs without it")
	fs.StringVar(&o.broker, "broker", "auto", "auto (real broker when its jars are present, else kfake), real or kfake")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(*lat, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return o, fmt.Errorf("-latencies %q: %w", s, err)
		}
		o.latencies = append(o.latencies, d)
	}
	for _, s := range strings.Split(*inf, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
			return o, fmt.Errorf("-inflight %q: want positive integers", s)
		}
		o.inFlight = append(o.inFlight, n)
	}
	for _, s := range strings.Split(*dup, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
			return o, fmt.Errorf("-dup %q: want positive integers", s)
		}
		o.dup = append(o.dup, n)
	}
	if o.wideConns < 0 || o.wideFlight < 1 {
		return o, fmt.Errorf("-wide-conns %d -wide-inflight %d: want a pool of 0 or more and an in-flight of 1 or more", o.wideConns, o.wideFlight)
	}
	if o.flood < 0 || (o.floodOnly && o.flood == 0) {
		return o, fmt.Errorf("-flood %d: want 0 or more records, and more than 0 with -flood-only", o.flood)
	}
	if o.reps < 1 {
		return o, fmt.Errorf("-reps %d: want at least 1", o.reps)
	}
	switch o.broker {
	case "auto", "real", "kfake":
	default:
		return o, fmt.Errorf("-broker %q: want auto, real or kfake", o.broker)
	}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.ReplaceAll(strings.TrimSpace(s), " ", ""); s != "" {
			o.only = append(o.only, s)
		}
	}
	o.args = args
	return o, nil
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	env, err := startEnv(ctx, o, log)
	if err != nil {
		return err
	}
	defer env.close(log)

	var res *result
	if o.floodOnly {
		res = &result{}
	} else if res, err = measure(ctx, env, o, log); err != nil {
		return err
	}
	// Memory lines that cannot be measured (a broker that refuses the
	// flood's raw produce under load) do not throw away the throughput
	// cells and profiles measured before them: the report is written with
	// the failure in it, and the run still fails.
	var floodErr error
	if o.flood > 0 {
		if res.floods, floodErr = runFloods(ctx, env, o, log); floodErr != nil {
			if o.floodOnly {
				return floodErr
			}
			res.floodFailed = floodErr.Error()
		}
	}
	res.took = time.Since(start)
	report := res.markdown(env, o)
	if o.floodOnly {
		report = res.floodReport(env, o)
	}
	fmt.Print(report)
	if err := os.WriteFile(o.out, []byte(report), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	log.Info("report written", slog.String("file", o.out))
	if floodErr != nil {
		return fmt.Errorf("memory lines (the report holds the rest): %w", floodErr)
	}
	return nil
}
