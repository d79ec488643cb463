package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// The arguments of issue 30 point 6, each accepted before: a 100 KB
// CHARGE_ID with terminal escape sequences and a NUL (then stored and
// published in InvoiceCharged), a 5 KB ORDER_ID with ESC. Refused now, with
// an error that quotes nothing of them.
func TestResolveRefusesHostileArguments(t *testing.T) {
	charge := strings.Repeat("ch_", 100<<10/3) + "\x1b]0;owned\x07\x1b[2J\x00"
	orderID := strings.Repeat("o", 5<<10) + "\x1b[31m"
	for _, args := range [][]string{
		{"ord-1", "--charged", charge},
		{orderID, "--declined"},
		{"--declined", "ord\x1b[2J"},
	} {
		_, err := parseResolve(args, io.Discard)
		if err == nil {
			t.Errorf("parseResolve accepted %.40q…", args)
			continue
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\x1b\x00\x07") || len(msg) > 200 {
			t.Errorf("error quotes the argument: %.300q", msg)
		}
	}
}

func TestOrderIDArg(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want, err string
	}{
		{"ord-1", "ord-1", ""},
		{"é€😀 x", "é€😀 x", ""},
		{strings.Repeat("o", 128), strings.Repeat("o", 128), ""},
		{strings.Repeat("o", 129), "", "longer than 128 bytes (129)"},
		{" ", "", "blank"},
		{"ord\x1b", "", "control character"},
		{"ord\u0085", "", "control character"},
		{"ord\xff", "", "UTF-8"},
	} {
		got, err := orderIDArg(tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("orderIDArg(%.20q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestChargeIDArg(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want, err string
	}{
		{"ch_3MtwBwLkdIwHu7ix28a3tqPa", "ch_3MtwBwLkdIwHu7ix28a3tqPa", ""},
		{" pi_1 \n", "pi_1", ""}, // a paste's spaces
		{"a b~!", "a b~!", ""},
		{strings.Repeat("c", 255), strings.Repeat("c", 255), ""},
		{strings.Repeat("c", 256), "", "256 bytes, at most 255"},
		{"", "", "empty"},
		{" ", "", "empty"},
		{"ch_\x00", "", "byte 4 is 0x00"},
		{"ch_\x1b[2J", "", "byte 4 is 0x1b"},
		{"ch_é", "", "not printable ASCII"},
		{"ch_\x7f", "", "0x7f"},
	} {
		got, err := chargeIDArg(tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("chargeIDArg(%.20q) = %q, %v; want %q, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestNameAndNoteArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		note          bool
		in, want, err string
	}{
		{false, "alice", "alice", ""},
		{false, " José Núñez ", "José Núñez", ""},
		{false, strings.Repeat("é", 64), strings.Repeat("é", 64), ""}, // characters, not bytes
		{false, strings.Repeat("é", 65), "", "65 characters, at most 64"},
		{false, "", "", "required"},
		{false, "  ", "", "required"},
		{false, "al\nice", "", "character 3 (U+000A) is not printable"},
		{false, "al\u202eice", "", "U+202E"}, // a bidi override: the log would read otherwise
		{false, "al\x1b[2Jice", "", "U+001B"},
		{false, "al\xffice", "", "UTF-8"},
		{true, "", "", ""},
		{true, "gateway dashboard shows ch_1, see INC-42", "gateway dashboard shows ch_1, see INC-42", ""},
		{true, strings.Repeat("n", 512), strings.Repeat("n", 512), ""},
		{true, strings.Repeat("n", 513), "", "513 characters, at most 512"},
		{true, "line\rtwo", "", "U+000D"},
	} {
		f, what := nameArg, "--by"
		if tt.note {
			f, what = noteArg, "--note"
		}
		got, err := f(what, tt.in)
		if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && (!strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), what))) {
			t.Errorf("%s %.20q = %q, %v; want %q, %q", what, tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestSinceAndLimitArgs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), ""},
		{"2026-12-05T10:00:00.000000001+00:00", time.Time{}, "in the future"},
		{"2062-12-01T00:00:00Z", time.Time{}, "in the future"},
		{"1969-12-31T23:59:59Z", time.Time{}, "before 1970"},
		{"yesterday", time.Time{}, "not an RFC 3339 time"},
		{"2026-12-01", time.Time{}, "not an RFC 3339 time"},
		{"2026-12-01T00:00:00Z\x1b[2J", time.Time{}, `\x1b`}, // quoted, escaped
		{strings.Repeat("2026", 1000), time.Time{}, "4000 bytes"},
	} {
		got, err := sinceArg("--since", tt.in, now)
		if !got.Equal(tt.want) || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("sinceArg(%.30q) = %v, %v; want %v, %q", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && strings.ContainsRune(err.Error(), 0x1b) {
			t.Errorf("sinceArg(%.30q): raw escape in %q", tt.in, err)
		}
	}
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"1", 1, true}, {"1000000", 1000000, true},
		{"0", 0, false}, {"-3", 0, false}, {"1000001", 0, false}, {"99999999999999999999999", 0, false}, {"x", 0, false},
	} {
		got, err := limitArg("--limit", tt.in)
		if got != tt.want || (err == nil) != tt.ok || (err != nil && len(tt.in) > 8 && strings.Contains(err.Error(), tt.in)) {
			t.Errorf("limitArg(%q) = %d, %v; want %d, ok %v, the value not quoted", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// dlq replay checks --since and --limit before it reaches Kafka.
func TestReplayRefusesBadArguments(t *testing.T) {
	setValidEnv(t)
	for _, args := range [][]string{
		{"--since", "2999-01-01T00:00:00Z"},
		{"--since", "yesterday"},
		{"--limit", "0"},
		{"--limit", "-1"},
		{"--limit", strings.Repeat("9", 1000)},
		{"extra"},
	} {
		var stdout, stderr strings.Builder
		err := run(t.Context(), append([]string{"dlq", "replay", "--dry-run"}, args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), args[0]) && !strings.Contains(err.Error(), "unexpected") {
			t.Errorf("dlq replay %q: %v, want it refused naming %s", args, err, args[0])
		}
	}
}

// TestPeriodArg: the period of a reconciliation, by --since, --day, or
// --from and --to, the previous UTC day when none is given.
func TestPeriodArg(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 1, 30, 0, 0, time.UTC)
	day := func(y, m, d int) time.Time { return time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC) }
	for _, tt := range []struct {
		f        periodFlags
		from, to time.Time
		err      string
	}{
		{periodFlags{}, day(2026, 12, 4), day(2026, 12, 5), ""},
		{periodFlags{since: "24h"}, now.Add(-24 * time.Hour), now, ""},
		{periodFlags{since: "90m"}, now.Add(-90 * time.Minute), now, ""},
		{periodFlags{since: "30s"}, time.Time{}, time.Time{}, "want 1m to"},
		{periodFlags{since: "800h"}, time.Time{}, time.Time{}, "want 1m to"},
		{periodFlags{since: "a day"}, time.Time{}, time.Time{}, "not a duration"},
		{periodFlags{day: "2026-12-01"}, day(2026, 12, 1), day(2026, 12, 2), ""},
		{periodFlags{day: "2026-12-04"}, day(2026, 12, 4), day(2026, 12, 5), ""},
		{periodFlags{day: "2026-12-05"}, time.Time{}, time.Time{}, "has not ended"},
		{periodFlags{day: "2026-12-5"}, time.Time{}, time.Time{}, "not a date"},
		{periodFlags{day: "04/12/2026"}, time.Time{}, time.Time{}, "not a date"},
		{periodFlags{from: "2026-12-04T10:00:00Z", to: "2026-12-04T12:00:00+01:00"}, day(2026, 12, 4).Add(10 * time.Hour), day(2026, 12, 4).Add(11 * time.Hour), ""},
		{periodFlags{from: "2026-12-04T10:00:00Z"}, time.Time{}, time.Time{}, "go together"},
		{periodFlags{from: "2026-12-04T10:00:00Z", to: "2026-12-04T10:00:00Z"}, time.Time{}, time.Time{}, "not before --to"},
		{periodFlags{from: "2026-10-01T00:00:00Z", to: "2026-12-04T00:00:00Z"}, time.Time{}, time.Time{}, "apart, at most"},
		{periodFlags{from: "2026-12-04T10:00:00Z", to: "2026-12-06T00:00:00Z"}, time.Time{}, time.Time{}, "in the future"},
		{periodFlags{since: "1h", day: "2026-12-01"}, time.Time{}, time.Time{}, "give one of"},
	} {
		p, err := periodArg(tt.f, now)
		if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("periodArg(%+v) error = %v, want %q", tt.f, err, tt.err)
			continue
		}
		if err == nil && (!p.From.Equal(tt.from) || !p.To.Equal(tt.to)) {
			t.Errorf("periodArg(%+v) = %v, want %v – %v", tt.f, p, tt.from, tt.to)
		}
	}
}
