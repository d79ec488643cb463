package wire

import (
	"testing"
	"time"
)

// OccurredAt reads occurred_at from any value the consumer may meet, valid
// event or not, and never panics on an empty or broken one.
func TestOccurredAt(t *testing.T) {
	want := time.Date(2026, 3, 1, 12, 0, 0, 500, time.UTC)
	for _, tc := range []struct {
		raw string
		ok  bool
	}{
		{`{"occurred_at":"2026-03-01T13:00:00.0000005+01:00","event_id":"not checked"}`, true},
		{``, false},
		{`null`, false},
		{`not json`, false},
		{`{"occurred_at":"yesterday"}`, false},
		{`{"occurred_at":17}`, false},
		{`{}`, false},
		{`[1,2]`, false},
		{`{"occurred_at":"2026-03-01T12:00:00.0000005Z"`, false},
	} {
		got, ok := OccurredAt([]byte(tc.raw))
		if ok != tc.ok || (ok && !got.Equal(want)) {
			t.Errorf("OccurredAt(%q) = %v, %v; want ok %v (%v)", tc.raw, got, ok, tc.ok, want)
		}
	}
	if _, ok := OccurredAt(nil); ok {
		t.Errorf("OccurredAt(nil): ok")
	}
}
