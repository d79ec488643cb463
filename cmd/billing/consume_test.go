package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

func TestParseSwitch(t *testing.T) {
	long := strings.Repeat("é", 65)
	for _, tt := range []struct {
		args     []string
		withNote bool
		want     switchArgs
		wantErr  string
	}{
		{[]string{"--by", "alice", "--note", "standby promoted"}, true, switchArgs{"alice", "standby promoted"}, ""},
		{[]string{"--by=Zoë Ó'Brien"}, true, switchArgs{"Zoë Ó'Brien", ""}, ""},
		{[]string{"--by", strings.Repeat("é", 64)}, false, switchArgs{strings.Repeat("é", 64), ""}, ""},
		{[]string{}, true, switchArgs{}, "--by NAME: required"},
		{[]string{"--by", "  "}, true, switchArgs{}, "--by NAME: required"},
		{[]string{"--by", long}, true, switchArgs{}, "65 characters, at most 64"},
		{[]string{"--by", "al\x1bice"}, true, switchArgs{}, "is not printable"},
		{[]string{"--by", "al\u200eice"}, true, switchArgs{}, "is not printable"},
		{[]string{"--by", "alice", "--note", strings.Repeat("x", 513)}, true, switchArgs{}, "513 characters, at most 512"},
		{[]string{"--by", "alice", "--note", "two\nlines"}, true, switchArgs{}, "is not printable"},
		{[]string{"--by", "alice", "--note", "x"}, false, switchArgs{}, "usage"},
		{[]string{"--by", "alice", "now"}, true, switchArgs{}, `unexpected argument "now"`},
		{[]string{"--by", "\xff"}, true, switchArgs{}, "not valid UTF-8"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			got, err := parseSwitch("consume pause", tt.withNote, tt.args, io.Discard)
			switch {
			case tt.wantErr == "" && (err != nil || got != tt.want):
				t.Errorf("parseSwitch() = %+v, %v, want %+v", got, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("parseSwitch() error = %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

// clearEnv unsets every BILLING_* variable: `consume` reads only the
// database's part (docs/interface.md §1), so it must run where the service's
// Kafka and gateway settings are not set.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, n := range config.Names() {
		unsetenv(t, n)
	}
}

// `billing consume pause` and `resume` need nothing but the database: each
// records its decision and prints the switch before and after; without
// BILLING_DATABASE_URL they stop with one line naming it, and their help
// reads nothing.
func TestConsumePauseResume(t *testing.T) {
	clearEnv(t)
	var stdout, stderr bytes.Buffer
	for _, cmd := range []string{"pause", "resume"} {
		stdout.Reset()
		if err := run(context.Background(), []string{"consume", cmd, "-h"}, &stdout, &stderr); err != nil ||
			!strings.Contains(stdout.String(), "usage: billing consume "+cmd+" --by NAME") {
			t.Errorf("billing consume %s -h = %v:\n%s", cmd, err, stdout.String())
		}
	}
	err := run(context.Background(), []string{"consume", "pause", "--by", "alice"}, &stdout, &stderr)
	if ce := (*config.Error)(nil); !errors.As(err, &ce) || ce.Var != "BILLING_DATABASE_URL" {
		t.Errorf("pause without BILLING_DATABASE_URL: %v, want a config error naming it", err)
	}

	ctx := migrateCtx(t)
	_, pool := pgtest.NewMigratedCluster(t)
	t.Setenv("BILLING_DATABASE_URL", pool.Config().ConnString())
	var out, logs syncbuf.Buffer
	if err := run(ctx, []string{"consume", "pause", "--by", "alice", "--note", "standby promoted"}, &out, &logs); err != nil {
		t.Fatalf("billing consume pause: %v\n%s", err, logs.String())
	}
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`
	want := regexp.MustCompile(`^before: consuming \(never paused\)\nafter:  paused by alice at ` + stamp + ` \(decision \d+\): standby promoted\n$`)
	if !want.MatchString(out.String()) {
		t.Errorf("pause printed:\n%s\nwant %s", out.String(), want)
	}
	if !strings.Contains(logs.String(), `"msg":"consumption switch set","command":"consume pause","decided_by":"alice"`) {
		t.Errorf("pause did not log its decision:\n%s", logs.String())
	}
	var out2 syncbuf.Buffer
	if err := run(ctx, []string{"consume", "resume", "--by", "bob"}, &out2, &logs); err != nil {
		t.Fatalf("billing consume resume: %v\n%s", err, logs.String())
	}
	want = regexp.MustCompile(`^before: paused by alice at ` + stamp + ` \(decision \d+\): standby promoted\nafter:  consuming: resumed by bob at ` + stamp + ` \(decision \d+\)\n$`)
	if !want.MatchString(out2.String()) {
		t.Errorf("resume printed:\n%s\nwant %s", out2.String(), want)
	}
	var rows []string
	r, err := pool.Query(ctx, `SELECT decided_by || ' ' || command || ' ' || coalesce(note, '-') FROM decision ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var s string
		if err := r.Scan(&s); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, s)
	}
	if got := strings.Join(rows, "; "); got != "alice consume pause standby promoted; bob consume resume -" {
		t.Errorf("decisions kept: %s", got)
	}
}
