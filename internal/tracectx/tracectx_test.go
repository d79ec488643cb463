package tracectx

import (
	"context"
	"strings"
	"testing"
)

const (
	validTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	validSpanID  = "00f067aa0ba902b7"
	validHeader  = "00-" + validTraceID + "-" + validSpanID + "-01"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantOK    bool
		wantFlags byte
		wantOut   string // String() of the parsed value, when ok
	}{
		{"spec example", validHeader, true, 0x01, validHeader},
		{"not sampled", "00-" + validTraceID + "-" + validSpanID + "-00", true, 0x00, "00-" + validTraceID + "-" + validSpanID + "-00"},
		{"v00 unknown flags kept", "00-" + validTraceID + "-" + validSpanID + "-09", true, 0x09, "00-" + validTraceID + "-" + validSpanID + "-09"},
		{"future version exact length", "cc-" + validTraceID + "-" + validSpanID + "-01", true, 0x01, validHeader},
		{"future version keeps only sampled flag", "01-" + validTraceID + "-" + validSpanID + "-03", true, 0x01, validHeader},
		{"future version with more fields", "cc-" + validTraceID + "-" + validSpanID + "-01-what-the-future-holds", true, 0x01, validHeader},

		{"empty", "", false, 0, ""},
		{"version ff", "ff-" + validTraceID + "-" + validSpanID + "-01", false, 0, ""},
		{"v00 too long", validHeader + "-", false, 0, ""},
		{"v00 trailing data", validHeader + "x", false, 0, ""},
		{"too short", validHeader[:54], false, 0, ""},
		{"future version without dash after flags", "cc-" + validTraceID + "-" + validSpanID + "-01x", false, 0, ""},
		{"upper-case trace id", "00-" + strings.ToUpper(validTraceID) + "-" + validSpanID + "-01", false, 0, ""},
		{"upper-case span id", "00-" + validTraceID + "-00F067AA0BA902B7-01", false, 0, ""},
		{"upper-case version", "0A-" + validTraceID + "-" + validSpanID + "-01", false, 0, ""},
		{"upper-case flags", "00-" + validTraceID + "-" + validSpanID + "-0A", false, 0, ""},
		{"zero trace id", "00-" + strings.Repeat("0", 32) + "-" + validSpanID + "-01", false, 0, ""},
		{"zero span id", "00-" + validTraceID + "-" + strings.Repeat("0", 16) + "-01", false, 0, ""},
		{"non-hex in trace id", "00-" + validTraceID[:31] + "g-" + validSpanID + "-01", false, 0, ""},
		{"non-hex version", "0x-" + validTraceID + "-" + validSpanID + "-01", false, 0, ""},
		{"wrong separator", "00_" + validTraceID + "-" + validSpanID + "-01", false, 0, ""},
		{"missing dash before flags", "00-" + validTraceID + "-" + validSpanID + "001", false, 0, ""},
		{"leading space", " " + validHeader[:54], false, 0, ""},
		{"trailing space", validHeader + " ", false, 0, ""},
		{"short trace id", "00-" + validTraceID[:30] + "-" + validSpanID + "-01xx", false, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Parse(tt.in)
			if ok != tt.wantOK {
				t.Fatalf("Parse(%q) ok = %v, want %v", tt.in, ok, tt.wantOK)
			}
			if !ok {
				if got != (TraceParent{}) {
					t.Errorf("Parse(%q) = %+v on failure, want the zero value", tt.in, got)
				}
				return
			}
			if got.Flags != tt.wantFlags {
				t.Errorf("Parse(%q).Flags = %#x, want %#x", tt.in, got.Flags, tt.wantFlags)
			}
			if s := got.String(); s != tt.wantOut {
				t.Errorf("Parse(%q).String() = %q, want %q", tt.in, s, tt.wantOut)
			}
			if s := got.TraceIDString(); s != validTraceID {
				t.Errorf("TraceIDString() = %q, want %q", s, validTraceID)
			}
			if s := got.SpanIDString(); s != validSpanID {
				t.Errorf("SpanIDString() = %q, want %q", s, validSpanID)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	t.Parallel()
	tp, ok := Parse(validHeader)
	if !ok {
		t.Fatalf("Parse(%q) failed", validHeader)
	}
	wantTrace := [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	wantSpan := [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	if tp.TraceID != wantTrace {
		t.Errorf("TraceID = %x, want %x", tp.TraceID, wantTrace)
	}
	if tp.SpanID != wantSpan {
		t.Errorf("SpanID = %x, want %x", tp.SpanID, wantSpan)
	}
	if !tp.Sampled() {
		t.Errorf("Sampled() = false, want true")
	}
}

func TestChild(t *testing.T) {
	t.Parallel()
	parent, ok := Parse(validHeader)
	if !ok {
		t.Fatalf("Parse(%q) failed", validHeader)
	}
	seen := map[[8]byte]bool{}
	for range 100 {
		c := Child(parent)
		if c.TraceID != parent.TraceID {
			t.Fatalf("child trace id = %x, want the parent's %x", c.TraceID, parent.TraceID)
		}
		if c.Flags != parent.Flags {
			t.Errorf("child flags = %#x, want %#x", c.Flags, parent.Flags)
		}
		if c.SpanID == parent.SpanID || c.SpanID == [8]byte{} {
			t.Fatalf("child span id = %x, want a new non-zero one", c.SpanID)
		}
		if seen[c.SpanID] {
			t.Fatalf("span id %x repeated within 100 children", c.SpanID)
		}
		seen[c.SpanID] = true
		if back, ok := Parse(c.String()); !ok || back != c {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v, true", c.String(), back, ok, c)
		}
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if got, ok := FromContext(ctx); ok {
		t.Fatalf("FromContext(empty) = %+v, true; want false", got)
	}
	tp, _ := Parse(validHeader)
	got, ok := FromContext(NewContext(ctx, tp))
	if !ok || got != tp {
		t.Errorf("FromContext(NewContext(tp)) = %+v, %v; want %+v, true", got, ok, tp)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(validHeader)
	f.Add("cc-" + validTraceID + "-" + validSpanID + "-01-x")
	f.Fuzz(func(t *testing.T, s string) {
		tp, ok := Parse(s)
		if !ok {
			return
		}
		out := tp.String()
		back, ok := Parse(out)
		if !ok || back != tp {
			t.Fatalf("Parse(%q) = %+v, but Parse(String()=%q) = %+v, %v", s, tp, out, back, ok)
		}
		if s[:2] == "00" && out != s {
			t.Fatalf("version 00 %q formatted back as %q", s, out)
		}
	})
}
