package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/acme/billing/internal/config"
)

// Every bad variable stops every configured command with one line naming it.
func TestBadConfigurationIsOneLine(t *testing.T) {
	for _, cmd := range [][]string{{"run"}, {"migrate"}, {"dlq", "replay"}, {}} {
		for _, tc := range []struct{ name, value string }{
			{"BILLING_KAFKA_BROKERS", ""},
			{"BILLING_DATABASE_URL", ""},
			{"BILLING_RETRY_DELAYS", "1s,later"},
			{"BILLING_MAX_IN_FLIGHT", "-1"},
			{"BILLING_SHUTDOWN_TIMEOUT", "forever"},
		} {
			t.Run(strings.Join(cmd, "_")+"/"+tc.name, func(t *testing.T) {
				setValidEnv(t)
				t.Setenv(tc.name, tc.value)
				var stdout, stderr bytes.Buffer
				err := run(context.Background(), cmd, &stdout, &stderr)
				if err == nil {
					t.Fatal("accepted a bad variable")
				}
				msg := err.Error()
				if !strings.Contains(msg, tc.name) || strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
					t.Errorf("error %q: want one line naming %s, without the password", msg, tc.name)
				}
			})
		}
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"frobnicate"}, &stdout, &stderr); err == nil {
		t.Fatal("unknown command accepted")
	}
	if !strings.Contains(stderr.String(), "usage: billing") || !strings.Contains(stderr.String(), `unknown command "frobnicate"`) {
		t.Errorf("stderr = %q, want the unknown command named and the usage", stderr.String())
	}
	stderr.Reset()
	setValidEnv(t)
	if err := run(context.Background(), []string{"dlq", "replay", "--limit", "x"}, &stdout, &stderr); err == nil {
		t.Error("--limit x accepted")
	}
	if !strings.Contains(stderr.String(), "invalid value") {
		t.Errorf("stderr = %q, want the flag error", stderr.String())
	}
}

// setValidEnv sets a complete, valid configuration (nothing listens there).
func setValidEnv(t *testing.T) {
	t.Helper()
	for _, n := range config.Names() {
		t.Setenv(n, "")
	}
	t.Setenv("BILLING_KAFKA_BROKERS", "127.0.0.1:9")
	t.Setenv("BILLING_DATABASE_URL", "postgres://billing:hunter2@127.0.0.1:9/billing")
	t.Setenv("BILLING_PAYMENT_BASE_URL", "http://127.0.0.1:9")
	t.Setenv("BILLING_RETRY_DELAYS", "1s")
	t.Setenv("BILLING_MAX_IN_FLIGHT", "4")
	t.Setenv("BILLING_SHUTDOWN_TIMEOUT", "5s")
	t.Setenv("BILLING_PAYMENT_TIMEOUT", "1s")
	t.Setenv("BILLING_DEDUP_RETENTION", "24h")
	t.Setenv("BILLING_PENDING_RESUME_AFTER", "15m")
	t.Setenv("BILLING_GATEWAY_KEY_TTL", "24h")
	t.Setenv("BILLING_DEFAULT_CURRENCY", "USD")
	t.Setenv("BILLING_LOG_LEVEL", "info")
	t.Setenv("BILLING_KAFKA_TOPIC", "t")
	t.Setenv("BILLING_KAFKA_GROUP_ID", "g")
	t.Setenv("BILLING_KAFKA_RETRY_TOPIC_PREFIX", "r")
	t.Setenv("BILLING_KAFKA_DLQ_TOPIC", "d")
	t.Setenv("BILLING_KAFKA_CLIENT_ID", "c")
	t.Setenv("BILLING_HTTP_ADDR", ":0")
	t.Setenv("BILLING_KAFKA_TLS_ENABLED", "false")
	t.Setenv("BILLING_MIGRATE_ON_START", "false")
	t.Setenv("BILLING_PUBLISH_EVENTS", "true")
	t.Setenv("BILLING_KAFKA_INVOICE_TOPIC", "i")
	t.Setenv("BILLING_DB_MAX_CONNS", "0")
}

// Help needs no configuration: with none set, every form prints usage to
// stdout and succeeds.
func TestHelpWithoutConfiguration(t *testing.T) {
	for _, n := range config.Names() {
		t.Setenv(n, "")
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"run", "-h"}, {"migrate", "--help"},
		{"dlq", "replay", "-h"}, {"dlq", "replay", "--limit", "3", "-h"}, {"dlq", "-h"}, {"version", "-h"},
		{"help", "migrate"}, {"help", "dlq", "replay"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("billing %s: %v, want usage and success", strings.Join(args, " "), err)
			}
			if !strings.Contains(stdout.String(), "usage: billing") {
				t.Errorf("stdout = %q, want usage", stdout.String())
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"dlq", "replay", "-h"}, &stdout, &stderr); err == nil {
		for _, flag := range []string{"--since", "--limit", "--dry-run"} {
			if !strings.Contains(stdout.String(), flag) {
				t.Errorf("dlq replay -h does not mention %s", flag)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "billing ") || !strings.Contains(out, "revision ") || !strings.Contains(out, "go1.") {
		t.Errorf("version = %q, want version, revision and Go version", out)
	}
}

// The fatal start-up error is one JSON line like every other log line, and
// still names the variable.
func TestFatalErrorIsOneJSONLine(t *testing.T) {
	setValidEnv(t)
	t.Setenv("BILLING_RETRY_DELAYS", "1s,later")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run"}, &stdout, &stderr)
	if err == nil {
		t.Fatal("accepted a bad variable")
	}
	var line bytes.Buffer
	reportFatal(&line, err)
	if n := strings.Count(line.String(), "\n"); n != 1 {
		t.Fatalf("fatal report %q: %d lines, want 1", line.String(), n)
	}
	var rec map[string]any
	if err := json.Unmarshal(line.Bytes(), &rec); err != nil {
		t.Fatalf("fatal report %q is not JSON: %v", line.String(), err)
	}
	if rec["level"] != "ERROR" || !strings.Contains(fmt.Sprint(rec["error"]), "BILLING_RETRY_DELAYS") {
		t.Errorf("fatal report %v: want level ERROR and an error naming the variable", rec)
	}
}

// TestHelpListsCommands: `billing -h` (and `billing help`) lists every
// command with a line on what it does, not just the names.
func TestHelpListsCommands(t *testing.T) {
	for _, n := range config.Names() {
		t.Setenv(n, "")
	}
	for _, args := range [][]string{{"-h"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("billing %s: %v", strings.Join(args, " "), err)
		}
		out := stdout.String()
		for _, want := range []struct{ cmd, says string }{
			{"run", "bill each order once"},
			{"migrate", "database migrations"},
			{"dlq replay", "back to the main topic"},
			{"invoice resolve", "a person's decision on a held invoice"},
			{"demo", "in-process"},
			{"version", "version and VCS revision"},
		} {
			var line string
			for l := range strings.Lines(out) {
				if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(strings.TrimSpace(l), want.cmd+" ") {
					line = l
				}
			}
			if !strings.Contains(line, want.says) {
				t.Errorf("billing %s: the line of %s is %q, want it to say %q; output:\n%s", strings.Join(args, " "), want.cmd, line, want.says, out)
			}
		}
		if !strings.Contains(out, "billing run -h") {
			t.Errorf("billing %s does not point to billing run -h for the configuration:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestRunHelpListsConfiguration: `billing run -h` lists every BILLING_*
// variable with its default (or "required") and its meaning, from the
// config struct, without reading the environment: a bad value set does not
// stop it.
func TestRunHelpListsConfiguration(t *testing.T) {
	setValidEnv(t)
	t.Setenv("BILLING_MAX_IN_FLIGHT", "-1")
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"run", "-h"}, &stdout, &stderr); err != nil {
		t.Fatalf("billing run -h with a bad variable set: %v", err)
	}
	lines := map[string]string{}
	for l := range strings.Lines(stdout.String()) {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := config.Prefix + "_" + f.Tag.Get("envconfig")
		line, ok := lines[name]
		if !ok {
			t.Errorf("billing run -h does not list %s:\n%s", name, stdout.String())
			continue
		}
		def := f.Tag.Get("default")
		if f.Tag.Get("required") == "true" {
			def = "required"
		}
		if def != "" && !strings.Contains(line, " "+def+" ") {
			t.Errorf("billing run -h: %q lacks the default %q", line, def)
		}
		if !strings.HasSuffix(strings.TrimSpace(line), f.Tag.Get("desc")) {
			t.Errorf("billing run -h: %q lacks the meaning %q", line, f.Tag.Get("desc"))
		}
	}
	if !strings.Contains(stdout.String(), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("billing run -h does not say how to switch tracing on:\n%s", stdout.String())
	}
}
