package kafka

import (
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"pgregory.net/rapid"
)

// TestTrackerNeverCommitsPastUnfinished drives the tracker with random
// fetches over several partitions (including redeliveries of offsets after a
// simulated rebalance), random completion orders and random commits, and
// checks the commit rule: a committed offset never passes an event that is
// not final, and once everything is final the watermark reaches the end.
func TestTrackerNeverCommitsPastUnfinished(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		tr := newTracker()
		nparts := rapid.IntRange(1, 4).Draw(t, "partitions")
		next := make([]int64, nparts)            // next offset to fetch per partition
		pending := make([]map[int64]int, nparts) // model: in flight
		committed := make([]int64, nparts)       // model: last committed watermark
		for p := range pending {
			pending[p] = map[int64]int{}
			committed[p] = -1
		}
		var flight []kafkago.Message
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1, 2, 3: // fetch
				p := rapid.IntRange(0, nparts-1).Draw(t, "p")
				if rapid.IntRange(0, 20).Draw(t, "gap") == 0 {
					next[p] += int64(rapid.IntRange(1, 3).Draw(t, "skip")) // compaction/txn markers
				}
				m := kafkago.Message{Topic: "t", Partition: p, Offset: next[p]}
				next[p]++
				tr.fetched(m)
				pending[p][m.Offset]++
				flight = append(flight, m)
			case 4: // redelivery after a rebalance: an offset at or after the last commit comes again
				p := rapid.IntRange(0, nparts-1).Draw(t, "p")
				lo := max(committed[p], 0)
				if next[p] <= lo {
					continue
				}
				off := rapid.Int64Range(lo, next[p]-1).Draw(t, "redeliver")
				m := kafkago.Message{Topic: "t", Partition: p, Offset: off}
				tr.fetched(m)
				pending[p][off]++
				flight = append(flight, m)
			case 5, 6, 7: // an event becomes final, in any order
				if len(flight) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(flight)-1).Draw(t, "done")
				m := flight[i]
				flight = append(flight[:i], flight[i+1:]...)
				tr.done(m)
				if pending[m.Partition][m.Offset]--; pending[m.Partition][m.Offset] == 0 {
					delete(pending[m.Partition], m.Offset)
				}
			default: // commit
				msgs := tr.committable()
				for _, m := range msgs {
					w := m.Offset + 1
					for off := range pending[m.Partition] {
						if off < w {
							t.Fatalf("partition %d: commit of %d passes unfinished offset %d", m.Partition, w, off)
						}
					}
					if w <= committed[m.Partition] {
						t.Fatalf("partition %d: commit %d does not advance past %d", m.Partition, w, committed[m.Partition])
					}
					committed[m.Partition] = w
				}
				tr.markCommitted(msgs)
			}
		}
		// Finish everything: the watermark must reach one past the last fetch.
		for _, m := range flight {
			tr.done(m)
		}
		tr.markCommitted(tr.committable())
		for p := range nparts {
			if next[p] == 0 {
				continue
			}
			ps := tr.parts[topicPartition{"t", p}]
			if ps == nil || ps.committed != next[p] {
				t.Fatalf("partition %d: committed %v, want %d", p, ps, next[p])
			}
		}
		if n := tr.inFlight(); n != 0 {
			t.Fatalf("in flight after finishing everything = %d, want 0", n)
		}
	})
}
