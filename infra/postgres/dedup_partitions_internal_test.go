package postgres

import (
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
)

// TestUUIDV7Floor checks the partition bounds against ids that gofrs/uuid
// makes at known times: an id made at t lies in [floor(t), floor(t+1ms))
// and in its UTC day's partition.
func TestUUIDV7Floor(t *testing.T) {
	t.Parallel()
	times := []time.Time{
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(2031, 3, 10, 12, 34, 56, 789_123_456, time.UTC),
		time.Date(2099, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(2026, 6, 15, 1, 2, 3, 0, time.FixedZone("UTC+5", 5*3600)),
		time.Now(),
	}
	for _, at := range times {
		// A generator per time: gofrs keeps ids of one generator monotonic,
		// and the default one is shared with the rest of the tests.
		id, err := uuid.NewGen().NewV7AtTime(at)
		if err != nil {
			t.Fatalf("NewV7AtTime(%v) error = %v", at, err)
		}
		ms := at.Truncate(time.Millisecond)
		if lo, hi := uuidV7Floor(at), uuidV7Floor(at.Add(time.Millisecond)); bytesLess(id, lo) || !bytesLess(id, hi) {
			t.Errorf("id made at %v = %s, want in [%s, %s)", at, id, lo, hi)
		}
		p := dayPartition(utcDay(at))
		if bytesLess(id, p.lo) || !bytesLess(id, p.hi) {
			t.Errorf("id made at %v = %s, want in partition %s [%s, %s)", at, id, p.name, p.lo, p.hi)
		}
		if got := uuidV7Time(id); !got.Equal(ms) {
			t.Errorf("uuidV7Time(%s) = %v, want %v", id, got, ms)
		}
		if got := uuidV7Time(uuidV7Floor(at)); !got.Equal(ms) {
			t.Errorf("uuidV7Time(uuidV7Floor(%v)) = %v, want %v", at, got, ms)
		}
	}
	// The bound the migration's SQL computes for 2026-12-01.
	if got, want := uuidV7Floor(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)).String(), "01a22ee6-b000-0000-0000-000000000000"; got != want {
		t.Errorf("uuidV7Floor(2026-12-01) = %s, want %s", got, want)
	}
	if got := uuidV7Floor(time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)); got != uuid.Nil {
		t.Errorf("uuidV7Floor(1969-12-31) = %s, want the nil UUID", got)
	}
}

func TestDayPartition(t *testing.T) {
	t.Parallel()
	p := dayPartition(time.Date(2031, 3, 10, 0, 0, 0, 0, time.UTC))
	if p.name != "processed_event_p20310310" {
		t.Errorf("name = %q, want processed_event_p20310310", p.name)
	}
	if got, want := uuidV7Time(p.lo), time.Date(2031, 3, 10, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("lower bound time = %v, want %v", got, want)
	}
	if got, want := uuidV7Time(p.hi), time.Date(2031, 3, 11, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("upper bound time = %v, want %v", got, want)
	}
	next := dayPartition(time.Date(2031, 3, 11, 0, 0, 0, 0, time.UTC))
	if next.lo != p.hi {
		t.Errorf("next day's lower bound = %s, want this day's upper %s", next.lo, p.hi)
	}
	tests := []struct {
		name   string
		q      partition
		lo, hi uuid.UUID
		want   bool
	}{
		{"same range", p, p.lo, p.hi, true},
		{"next day", p, next.lo, next.hi, false},
		{"previous day", next, p.lo, p.hi, false},
		{"straddles", p, uuidV7Floor(time.Date(2031, 3, 10, 12, 0, 0, 0, time.UTC)), next.hi, true},
		{"default", partition{name: defaultPartition, isDefault: true}, p.lo, p.hi, false},
		{"unbounded", partition{name: "x"}, p.lo, p.hi, true},
	}
	for _, tt := range tests {
		if got := tt.q.overlaps(tt.lo, tt.hi); got != tt.want {
			t.Errorf("%s: overlaps = %v, want %v", tt.name, got, tt.want)
		}
	}
}
