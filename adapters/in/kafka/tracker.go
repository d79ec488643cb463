package kafka

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// partState is what one generation knows of one partition it was assigned:
// the offsets fetched and not yet final (with a count, since a partition
// reader may deliver an offset again after a fetch error), the highest
// offset fetched, and the offset last committed (the next one to read).
// Kafka fetches a partition in offset order, so everything below the
// watermark was fetched and is final.
//
// A partState lives as long as its generation holds the partition. revoke
// ends it: from then on nothing it learns is committed, so an event that
// finishes after its partition moved to another member can never move the
// group's offset (the other member's commit) backwards. When the partition
// comes back, a new partState starts from the committed offset.
type partState struct {
	topic     string
	partition int
	inFlightG prometheus.Gauge // billing_consumer_in_flight of its topic

	mu        sync.Mutex
	pending   map[int64]int
	maxSeen   int64
	committed int64
	revoked   bool
}

// newPartState starts a partition at the offset the group assigned: its
// committed offset, or a negative one (the group's start offset, see
// Assignment) when the group never committed it.
func newPartState(topic string, partition int, start int64) *partState {
	ps := &partState{topic: topic, partition: partition,
		pending: map[int64]int{}, maxSeen: -1, committed: -1}
	if start >= 0 {
		ps.maxSeen, ps.committed = start-1, start
	}
	return ps
}

// fetched records that offset is in flight; false when the partition was
// revoked, so the event must not be handled for it.
func (ps *partState) fetched(offset int64) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.revoked {
		return false
	}
	ps.pending[offset]++
	if offset > ps.maxSeen {
		ps.maxSeen = offset
	}
	return true
}

// done records that offset's outcome is final. After revoke it changes
// nothing.
func (ps *partState) done(offset int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.revoked {
		return
	}
	if n := ps.pending[offset]; n > 1 {
		ps.pending[offset] = n - 1
	} else {
		delete(ps.pending, offset)
	}
}

// watermark returns the next offset to read: every offset below it is final.
func (ps *partState) watermark() int64 {
	next := ps.maxSeen + 1
	for off := range ps.pending {
		if off < next {
			next = off
		}
	}
	return next
}

// committable returns the watermark to commit when it moved past the last
// commit; false when there is nothing to commit or the partition was revoked.
func (ps *partState) committable() (int64, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.revoked {
		return 0, false
	}
	w := ps.watermark()
	return w, w > ps.committed && w > 0
}

// markCommitted records a successful commit of w (as returned by committable).
func (ps *partState) markCommitted(w int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if w > ps.committed {
		ps.committed = w
	}
}

// inFlight returns the number of fetched events not yet final.
func (ps *partState) inFlight() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, c := range ps.pending {
		n += c
	}
	return n
}

// revoke ends the partition's state for its generation; idempotent.
func (ps *partState) revoke() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.revoked = true
	ps.pending = nil
}
