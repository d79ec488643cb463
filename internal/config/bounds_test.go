package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The configurations of issue 30 point 5, each accepted at start before:
// a pool of 2^31-1 connections, payment and shutdown timeouts of a year
// (the pod's grace period is 40 s), a resume after 1 ns, 500 retry tiers.
func TestLoadRejectsUnboundedValues(t *testing.T) {
	cases := []struct{ name, value, bounds string }{
		{"BILLING_DB_MAX_CONNS", "2147483647", "between 1 and 64"},
		{"BILLING_PAYMENT_TIMEOUT", "8760h", "between 100ms and 1m"},
		{"BILLING_SHUTDOWN_TIMEOUT", "8760h", "between 1s and 10m"},
		{"BILLING_PENDING_RESUME_AFTER", "1ns", "between 1s and 24h"},
		{"BILLING_RETRY_DELAYS", strings.Repeat("1s,", 499) + "1s", "500 entries, want 1 to 10"},
		{"BILLING_RETRY_DELAYS", "5s,8760h", "entry 2: 8760h is not between 100ms and 24h"},
		{"BILLING_MAX_IN_FLIGHT", "2147483647", "between 1 and 1024"},
		{"BILLING_GATEWAY_KEY_TTL", "87600h", "between 1h and 720h"},
		{"BILLING_DEDUP_RETENTION", "87600h", "between 1h and 2160h"},
	}
	for _, tc := range cases {
		t.Run(tc.name+"="+tc.value[:min(len(tc.value), 12)], func(t *testing.T) {
			setBase(t)
			t.Setenv(tc.name, tc.value)
			_, err := Load()
			var ce *Error
			if !errors.As(err, &ce) || ce.Var != tc.name || !strings.Contains(err.Error(), tc.bounds) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Load() with %s=%.40s: %v, want one line naming it and %q", tc.name, tc.value, err, tc.bounds)
			}
		})
	}
}

// TestBounds: for every row of the table, each end is accepted and a step
// beyond either end is rejected with one line naming the variable and the
// bounds; a list's length too.
func TestBounds(t *testing.T) {
	for _, b := range Bounds() {
		unit, value := int64(1), func(v int64) string { return strconv.FormatInt(v, 10) }
		if b.Kind == KindDuration {
			unit, value = int64(time.Nanosecond), func(v int64) string { return time.Duration(v).String() }
		}
		list := func(v string, n int) string { return strings.TrimSuffix(strings.Repeat(v+",", n), ",") }
		type tc struct {
			value string
			ok    bool
		}
		below := b.Min - unit
		if b.ZeroDerived && below == 0 {
			below = -unit // 0 is unset: derived
		}
		cases := []tc{{value(b.Min), true}, {value(b.Max), true}, {value(below), false}, {value(b.Max + unit), false}}
		if b.MaxEntries > 0 {
			for i := range cases {
				cases[i].value = list(cases[i].value, b.MaxEntries)
			}
			cases = append(cases, tc{list(value(b.Min), b.MaxEntries+1), false}, tc{list(value(b.Max), b.MinEntries), true})
		}
		if b.ZeroDerived {
			cases = append(cases, tc{"0", true})
		}
		for _, c := range cases {
			t.Run(b.Var+"="+c.value[:min(len(c.value), 16)], func(t *testing.T) {
				setBase(t)
				// Room for PENDING_RESUME_AFTER's relation to the key TTL.
				if b.Var != "BILLING_GATEWAY_KEY_TTL" {
					t.Setenv("BILLING_GATEWAY_KEY_TTL", "720h")
				}
				t.Setenv(b.Var, c.value)
				_, err := Load()
				switch {
				case c.ok && err != nil:
					t.Errorf("Load() rejected %s=%s: %v", b.Var, c.value, err)
				case !c.ok:
					var ce *Error
					if !errors.As(err, &ce) || ce.Var != b.Var || strings.Contains(err.Error(), "\n") ||
						(!strings.Contains(err.Error(), b.format(b.Min)+" and "+b.format(b.Max)) && !strings.Contains(err.Error(), "entries")) {
						t.Errorf("Load() with %s=%s: %v, want one line naming it and its bounds %s", b.Var, c.value, err, b)
					}
				}
			})
		}
	}
}

// TestEveryDurationAndCountIsBounded: every duration, list of durations
// and int of the configuration has a row in Bounds of its kind, and every
// row a variable; the defaults are within them.
func TestEveryDurationAndCountIsBounded(t *testing.T) {
	rows := map[string]Bound{}
	for _, b := range Bounds() {
		if _, dup := rows[b.Var]; dup {
			t.Errorf("%s: two rows", b.Var)
		}
		rows[b.Var] = b
		if b.Min > b.Max || b.MinEntries > b.MaxEntries || (b.Kind == KindCount && b.MaxEntries > 0) {
			t.Errorf("%s: bounds %+v", b.Var, b)
		}
	}
	durType, durList := reflect.TypeFor[time.Duration](), reflect.TypeFor[[]Duration]()
	for _, v := range Vars() {
		b, ok := rows[v.Name]
		delete(rows, v.Name)
		var want Kind
		switch v.field.Type {
		case durType, durList:
			want = KindDuration
		case reflect.TypeFor[int]():
			want = KindCount
		case reflect.TypeFor[Bytes]():
			want = KindBytes
		default:
			if ok {
				t.Errorf("%s: a %s with bounds", v.Name, v.field.Type)
			}
			continue
		}
		if !ok || b.Kind != want || (v.field.Type == durList) != (b.MaxEntries > 0) {
			t.Errorf("%s (%s): bound %+v, %v; want one of kind %d", v.Name, v.field.Type, b, ok, want)
		}
	}
	for n := range rows {
		t.Errorf("bound of %s: no such variable", n)
	}
	setBase(t)
	if _, err := Load(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

func TestBoundString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		b    Bound
		want string
	}{
		{Bound{Kind: KindDuration, Min: int64(100 * time.Millisecond), Max: int64(time.Minute)}, "100ms..1m"},
		{Bound{Kind: KindDuration, Min: int64(time.Hour), Max: int64(2160 * time.Hour)}, "1h..2160h"},
		{Bound{Kind: KindDuration, Min: int64(90 * time.Second), Max: int64(90 * time.Minute), MinEntries: 1, MaxEntries: 10}, "1..10 of 1m30s..1h30m"},
		{Bound{Kind: KindCount, Min: 1, Max: 64}, "1..64"},
	} {
		if got := tt.b.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.b, got, tt.want)
		}
	}
}

// Usage (billing run -h) prints each variable's bounds.
func TestUsagePrintsBounds(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := Usage(&b, AllParts); err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for l := range strings.Lines(b.String()) {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	for _, bd := range Bounds() {
		if !strings.Contains(lines[bd.Var], " "+bd.String()+" ") {
			t.Errorf("usage line %q lacks the bounds %s", lines[bd.Var], bd)
		}
	}
}

// Usage states the relations of the parts it lists.
func TestUsageStatesRelations(t *testing.T) {
	t.Parallel()
	var all, db strings.Builder
	if err := Usage(&all, AllParts); err != nil {
		t.Fatal(err)
	}
	if err := Usage(&db, PartDatabase); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(all.String(), "at most a quarter of BILLING_GATEWAY_KEY_TTL") || !strings.Contains(all.String(), "distinct topics") {
		t.Errorf("usage lacks the relations:\n%s", all.String())
	}
	if strings.Contains(db.String(), "Also:") {
		t.Errorf("the database's usage states others' relations:\n%s", db.String())
	}
}
