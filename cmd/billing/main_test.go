package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/acme/billing/internal/config"
)

// A bad variable stops every command that reads it with one line naming
// it, before the command does anything.
func TestBadConfigurationIsOneLine(t *testing.T) {
	for _, cmd := range [][]string{{"run"}, {"migrate"}, {"dlq", "replay"}, {"invoice", "resolve", "ord-1", "--declined"}, {}} {
		for _, tc := range []struct{ name, value string }{
			{"BILLING_KAFKA_BROKERS", ""},
			{"BILLING_DATABASE_URL", ""},
			{"BILLING_RETRY_DELAYS", "1s,later"},
			{"BILLING_MAX_IN_FLIGHT", "-1"},
			{"BILLING_SHUTDOWN_TIMEOUT", "forever"},
			{"BILLING_PAYMENT_TIMEOUT", "soon"},
			{"BILLING_LOG_LEVEL", "verbose"},
		} {
			c := commandOf(t, cmd)
			v, _ := config.Lookup(tc.name)
			if c.reads()&v.Part == 0 {
				continue // TestCommandReadsOnlyItsConfiguration
			}
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

// commandOf returns the command args run, and fails the test when none.
func commandOf(t *testing.T, args []string) command {
	t.Helper()
	name := "run"
	if len(args) > 0 {
		name = args[0]
	}
	if c, ok := lookup(name); ok {
		return c
	}
	if c, ok := lookup(strings.Join(args[:min(2, len(args))], " ")); ok {
		return c
	}
	t.Fatalf("no command %q", args)
	return command{}
}

// TestCommandsNeed: each command reads what docs/interface.md §1 says, and
// nothing more: migrate, invoice and consume the database (invoice with the
// attempt's terms, which come with it), dlq replay Kafka, reconcile the
// database and the gateway (with the terms its decisions take), help,
// version and demo nothing.
func TestCommandsNeed(t *testing.T) {
	want := map[string]config.Part{
		"run":             config.AllParts,
		"migrate":         config.PartDatabase,
		"dlq replay":      config.PartKafka,
		"invoice list":    config.PartDatabase,
		"invoice show":    config.PartDatabase | config.PartRules,
		"invoice resolve": config.PartDatabase | config.PartRules,
		"consume pause":   config.PartDatabase,
		"consume resume":  config.PartDatabase,
		"reconcile":       config.PartDatabase | config.PartGateway | config.PartRules,
		"demo":            0,
		"version":         0,
	}
	for _, c := range commands() {
		w, ok := want[c.name]
		if !ok {
			t.Errorf("command %s: not in this test; what does it read?", c.name)
			continue
		}
		if c.needs != w {
			t.Errorf("command %s reads %s, want %s", c.name, c.needs, w)
		}
		// Reading a secret of a part it does not need would put that secret
		// in its Job.
		if c.needs&config.PartGateway != 0 && c.name != "run" && c.name != "reconcile" {
			t.Errorf("command %s reads the gateway's settings", c.name)
		}
	}
}

// TestCommandReadsOnlyItsConfiguration: with only the variables of its
// parts set, and every other one missing or wrong, each command gets past
// its configuration (it fails later, on the closed port it was given, or
// not at all): `billing migrate` in the init container needs neither
// BILLING_KAFKA_BROKERS nor BILLING_PAYMENT_BASE_URL, and the replay Job no
// database or gateway secret (issue 31 point 8).
func TestCommandReadsOnlyItsConfiguration(t *testing.T) {
	for _, cmd := range [][]string{{"migrate", "--wait", "0"}, {"dlq", "replay", "--dry-run"}, {"invoice", "resolve", "ord-1", "--declined"}, {"version"}} {
		c := commandOf(t, cmd)
		t.Run(c.name, func(t *testing.T) {
			for _, n := range config.Names() {
				unsetenv(t, n)
			}
			for _, v := range config.Vars() {
				switch {
				case c.needs&v.Part != 0 && v.Required:
					t.Setenv(v.Name, validEnv[v.Name])
				case c.reads()&v.Part == 0:
					t.Setenv(v.Name, "not a value of "+v.Name)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			err := run(ctx, cmd, &stdout, &stderr)
			var ce *config.Error
			if errors.As(err, &ce) || strings.Contains(fmt.Sprint(err), "BILLING_") {
				t.Errorf("billing %s with only %s set: %v", strings.Join(cmd, " "), c.needs, err)
			}
		})
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
	if err := run(context.Background(), []string{"dlq", "replay", "--limit", "x"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "--limit") {
		t.Errorf("--limit x: %v, want an error naming --limit", err)
	}
	if err := run(context.Background(), []string{"dlq", "replay", "--dry-runn"}, &stdout, &stderr); err == nil || !strings.Contains(stderr.String(), "flag provided but not defined") {
		t.Errorf("--dry-runn: %v, stderr %q; want the flag error", err, stderr.String())
	}
}

// validEnv is a complete, valid configuration (nothing listens there).
var validEnv = map[string]string{
	"BILLING_KAFKA_BROKERS":            "127.0.0.1:9",
	"BILLING_DATABASE_URL":             "postgres://billing:hunter2@127.0.0.1:9/billing",
	"BILLING_PAYMENT_BASE_URL":         "http://127.0.0.1:9",
	"BILLING_RETRY_DELAYS":             "1s",
	"BILLING_MAX_IN_FLIGHT":            "4",
	"BILLING_SHUTDOWN_TIMEOUT":         "5s",
	"BILLING_PAYMENT_TIMEOUT":          "1s",
	"BILLING_DEDUP_RETENTION":          "24h",
	"BILLING_PENDING_RESUME_AFTER":     "15m",
	"BILLING_GATEWAY_KEY_TTL":          "24h",
	"BILLING_DEFAULT_CURRENCY":         "USD",
	"BILLING_LOG_LEVEL":                "info",
	"BILLING_KAFKA_TOPIC":              "t",
	"BILLING_KAFKA_GROUP_ID":           "g",
	"BILLING_KAFKA_RETRY_TOPIC_PREFIX": "r",
	"BILLING_KAFKA_DLQ_TOPIC":          "d",
	"BILLING_KAFKA_CLIENT_ID":          "c",
	"BILLING_HTTP_ADDR":                ":0",
	"BILLING_KAFKA_TLS_ENABLED":        "false",
	"BILLING_MIGRATE_ON_START":         "false",
	"BILLING_PUBLISH_EVENTS":           "true",
	"BILLING_KAFKA_INVOICE_TOPIC":      "i",
}

// setValidEnv sets validEnv and unsets every other variable.
func setValidEnv(t testing.TB) {
	t.Helper()
	for _, n := range config.Names() {
		unsetenv(t, n)
	}
	for k, v := range validEnv {
		t.Setenv(k, v)
	}
}

// unsetenv removes name for the rest of the test and restores it after;
// t.Setenv can only set, and an empty value is not the same as unset.
func unsetenv(t testing.TB, name string) {
	t.Helper()
	t.Setenv(name, "") // registers the restore
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
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
	for _, v := range config.Vars() {
		line, ok := lines[v.Name]
		if !ok {
			t.Errorf("billing run -h does not list %s:\n%s", v.Name, stdout.String())
			continue
		}
		def := v.Default
		if v.Required {
			def = "required"
		}
		if def != "" && !strings.Contains(line, " "+def+" ") {
			t.Errorf("billing run -h: %q lacks the default %q", line, def)
		}
		if !strings.HasSuffix(strings.TrimSpace(line), v.Desc) {
			t.Errorf("billing run -h: %q lacks the meaning %q", line, v.Desc)
		}
	}
	if !strings.Contains(stdout.String(), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("billing run -h does not say how to switch tracing on:\n%s", stdout.String())
	}
}
