package kafka

import (
	"testing"

	"pgregory.net/rapid"
)

// TestTrackerNeverCommitsPastUnfinished drives one partition's state with
// random fetches (including redeliveries of offsets), random completion
// orders, random commits and a revoke, and checks the commit rule: a
// committed offset never passes an event that is not final, never moves
// backwards, nothing is committable after revoke, and once everything is
// final the watermark reaches the end.
func TestTrackerNeverCommitsPastUnfinished(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(-2, 50).Draw(t, "start") // <0: kafka-go's FirstOffset, never committed
		ps := newPartState("t", 0, start)
		next := max(start, 0)      // next offset to fetch
		pending := map[int64]int{} // model: in flight
		committed := int64(-1)     // model: last committed watermark
		if start >= 0 {
			committed = start
		}
		revokeAt := rapid.IntRange(0, 400).Draw(t, "revoke at")
		var flight []int64
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for step := range steps {
			if step == revokeAt {
				ps.revoke()
			}
			revoked := step >= revokeAt
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1, 2, 3: // fetch
				if rapid.IntRange(0, 20).Draw(t, "gap") == 0 {
					next += int64(rapid.IntRange(1, 3).Draw(t, "skip")) // compaction/txn markers
				}
				off := next
				next++
				if ps.fetched(off) == revoked {
					t.Fatalf("fetched(%d) after revoke = %v", off, !revoked)
				}
				if !revoked {
					pending[off]++
					flight = append(flight, off)
				}
			case 4: // redelivery of an offset at or after the last commit
				lo := max(committed, 0)
				if next <= lo || revoked {
					continue
				}
				off := rapid.Int64Range(lo, next-1).Draw(t, "redeliver")
				ps.fetched(off)
				pending[off]++
				flight = append(flight, off)
			case 5, 6, 7: // an event becomes final, in any order
				if len(flight) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(flight)-1).Draw(t, "done")
				off := flight[i]
				flight = append(flight[:i], flight[i+1:]...)
				ps.done(off)
				if pending[off]--; pending[off] == 0 {
					delete(pending, off)
				}
			default: // commit
				w, ok := ps.committable()
				if !ok {
					continue
				}
				if revoked {
					t.Fatalf("commit of %d after revoke", w)
				}
				for off := range pending {
					if off < w {
						t.Fatalf("commit of %d passes unfinished offset %d", w, off)
					}
				}
				if w <= committed {
					t.Fatalf("commit %d does not advance past %d", w, committed)
				}
				committed = w
				ps.markCommitted(w)
			}
		}
		for _, off := range flight {
			ps.done(off)
		}
		if revokeAt < steps {
			if w, ok := ps.committable(); ok {
				t.Fatalf("revoked partition committable at %d", w)
			}
			return
		}
		if w, ok := ps.committable(); ok {
			ps.markCommitted(w)
		}
		if want := max(next, committed); next > 0 && ps.committed != want {
			t.Fatalf("committed %d, want %d", ps.committed, want)
		}
		if n := ps.inFlight(); n != 0 {
			t.Fatalf("in flight after finishing everything = %d, want 0", n)
		}
	})
}
