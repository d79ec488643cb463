package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkabroker"
	"github.com/acme/billing/internal/testkit/pgcluster"
)

// env is what every run shares: one Postgres cluster, one broker.
type env struct {
	root    string
	bin     string
	workDir string
	outDir  string

	pg      *pgcluster.Cluster
	dsn     string // database "billing", migrated by bin/billing migrate
	pgbench string // path of the pgbench of the same major version
	// The pgbench scripts (scripts.go): one event's transactions, the
	// yardstick, and a group's (the grouped store's shape).
	perEventScript, groupedScript string

	brokers    []string
	brokerKind string // what the report says about the broker
	brokerPID  int    // 0 for kfake (in this process)
	stopBroker func() error
	kc         *kafkaclient.Cluster

	runtime map[string]string // the Go runtime variables the Deployment gives the pod
	facts   []string          // machine facts for the report
}

func startEnv(ctx context.Context, o options, log *slog.Logger) (e *env, err error) {
	e = &env{}
	if e.root, err = filepath.Abs(o.root); err != nil {
		return nil, err
	}
	e.bin = o.bin
	if !filepath.IsAbs(e.bin) {
		e.bin = filepath.Join(e.root, e.bin)
	}
	if _, err := os.Stat(e.bin); err != nil {
		return nil, fmt.Errorf("binary %s: %w (make build)", e.bin, err)
	}
	if e.runtime, err = runtimeEnv(deploymentPath(e.root)); err != nil {
		return nil, err
	}
	e.outDir = filepath.Dir(o.out)
	if !filepath.IsAbs(e.outDir) {
		e.outDir = filepath.Join(e.root, e.outDir)
	}
	if err := os.MkdirAll(filepath.Join(e.outDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if e.perEventScript, e.groupedScript, err = writePgbenchScripts(e.outDir); err != nil {
		return nil, err
	}
	if e.workDir, err = os.MkdirTemp("", "billbench-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.close(log)
		}
	}()

	binDir, err := pgcluster.FindBinDir()
	if err != nil {
		return nil, err
	}
	e.pgbench = filepath.Join(binDir, "pgbench")
	if _, err := os.Stat(e.pgbench); err != nil {
		return nil, fmt.Errorf("pgbench not found beside the server (%s): scripts/bench.sh installs it", e.pgbench)
	}

	t := time.Now()
	e.pg, err = pgcluster.Start(ctx, filepath.Join(e.workDir, "pg"), pgcluster.Options{Fsync: true})
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	log.Info("postgres started", slog.Duration("took", time.Since(t)), slog.Int("port", e.pg.Port()))
	if err := e.createDatabase(ctx); err != nil {
		return nil, err
	}

	t = time.Now()
	if err := e.startBroker(o.broker); err != nil {
		return nil, err
	}
	log.Info("broker started", slog.String("kind", e.brokerKind), slog.Duration("took", time.Since(t)))
	if e.kc, err = kafkaclient.NewCluster(kafkaclient.Settings{Brokers: e.brokers, ClientID: "billbench"}); err != nil {
		return nil, err
	}

	// The schema comes from the binary under test, as in production.
	cmd := exec.CommandContext(ctx, e.bin, "migrate")
	cmd.Env = e.serviceEnv(map[string]string{"BILLING_LOG_LEVEL": "warn"})
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("billing migrate: %w\n%s", err, out)
	}
	return e, e.collectFacts(ctx)
}

func (e *env) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.pg.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE billing"); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	e.dsn = e.pg.DSN("billing")
	return nil
}

// startBroker starts the real broker with scripts/kafka.sh, or an
// in-process kfake cluster when kind is "kfake", or "auto" and the machine
// cannot run the real one (no jars, no java).
func (e *env) startBroker(kind string) error {
	why := "-broker kfake"
	if kind != "kfake" {
		b, err := kafkabroker.Start(e.root, filepath.Join(e.workDir, "kafka"))
		if err == nil {
			e.brokers = []string{b.Addr()}
			e.brokerKind = "Apache " + strings.Replace(b.Version, "kafka-", "Kafka ", 1) +
				", real single-node KRaft broker started by scripts/kafka.sh (JVM flags of kafka.sh: -XX:TieredStopAtLevel=1, SerialGC, heap ≤512 MiB)"
			e.brokerPID = b.PID()
			e.stopBroker = b.Stop
			return nil
		}
		if kind == "real" || !errors.Is(err, kafkabroker.ErrUnavailable) {
			return fmt.Errorf("real broker: %w", err)
		}
		why = err.Error()
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return fmt.Errorf("start kfake: %w", err)
	}
	e.brokers = c.ListenAddrs()
	e.brokerKind = "kfake (franz-go in-process fake, inside the driver process) — NOT the real broker (" + why + ")"
	e.stopBroker = func() error { c.Close(); return nil }
	return nil
}

// serviceEnv is the process environment without any BILLING_* variable of
// the caller's, plus the connection settings and extra.
func (e *env) serviceEnv(extra map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BILLING_") {
			out = append(out, kv)
		}
	}
	out = append(out,
		"BILLING_KAFKA_BROKERS="+strings.Join(e.brokers, ","),
		"BILLING_DATABASE_URL="+e.dsn,
		"BILLING_PAYMENT_BASE_URL=http://127.0.0.1:1",
	)
	for k, v := range e.runtime {
		out = append(out, k+"="+v)
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}

func (e *env) collectFacts(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	defer conn.Close(ctx)
	var version, fsync, syncCommit, fpw, sharedBuffers, walSync string
	if err := conn.QueryRow(ctx, `SELECT version(), current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('full_page_writes'), current_setting('shared_buffers'), current_setting('wal_sync_method')`).
		Scan(&version, &fsync, &syncCommit, &fpw, &sharedBuffers, &walSync); err != nil {
		return fmt.Errorf("postgres settings: %w", err)
	}
	if fsync != "on" || syncCommit != "on" {
		return fmt.Errorf("postgres runs with fsync=%s synchronous_commit=%s; the benchmark needs both on", fsync, syncCommit)
	}
	if i := strings.Index(version, " on "); i > 0 {
		version = version[:i]
	}
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(l[strings.Index(l, ":")+1:])
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	pgbenchVer, _ := exec.CommandContext(ctx, e.pgbench, "--version").Output()
	e.facts = []string{
		fmt.Sprintf("machine: %d CPUs (nproc), %s, %s RAM, Linux %s, %s", runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel)), runtime.Version()),
		fmt.Sprintf("postgres: %s — fsync=%s, synchronous_commit=%s, full_page_writes=%s, wal_sync_method=%s, shared_buffers=%s (throwaway cluster, internal/testkit/pgcluster Fsync: true)",
			version, fsync, syncCommit, fpw, walSync, sharedBuffers),
		"pgbench: " + strings.TrimSpace(string(pgbenchVer)),
		"broker: " + e.brokerKind,
		fmt.Sprintf("the service runs with %s, which %s gives the pod from its limits, and Go's own GOMAXPROCS (%d here; at least 2 in a pod, whatever its CPU limit)", fmtEnv(e.runtime), deployment, runtime.NumCPU()),
		"everything (Postgres, broker, gateway stub, producer, pgbench and the service) shares these CPUs",
	}
	return nil
}

// truncate empties the tables and checkpoints, so that every run starts
// from the same state and no run pays for the previous one's dirty pages.
func (e *env) truncate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "TRUNCATE processed_event, invoice, invoice_outbox"); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

func (e *env) close(log *slog.Logger) {
	if e.stopBroker != nil {
		if err := e.stopBroker(); err != nil {
			log.Warn("stop broker", slog.String("error", err.Error()))
		}
	}
	if e.pg != nil {
		if err := e.pg.Stop(context.Background()); err != nil {
			log.Warn("stop postgres", slog.String("error", err.Error()))
		}
	}
	if e.workDir != "" {
		if err := os.RemoveAll(e.workDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("remove work dir", slog.String("error", err.Error()))
		}
	}
}

// fmtEnv formats variables as sorted NAME=value pairs.
func fmtEnv(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	if len(out) == 0 {
		return "no Go runtime variables"
	}
	return strings.Join(out, " ")
}
