package kafka

import (
	"sort"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
)

type topicPartition struct {
	topic     string
	partition int
}

// partitionState is what the tracker knows of one partition: the offsets
// fetched and not yet final (with a count, since a rebalance can deliver an
// offset again while its first copy is still in flight), the highest offset
// fetched, and the offset last committed (the next one to read).
type partitionState struct {
	pending   map[int64]int
	maxSeen   int64
	committed int64
}

// tracker computes commit watermarks: per partition, the lowest offset that
// is not final yet, or one past the highest fetched when all are final.
// Kafka fetches a partition in offset order, so everything below that
// watermark was fetched and is final. Safe for concurrent use.
type tracker struct {
	mu    sync.Mutex
	parts map[topicPartition]*partitionState
}

func newTracker() *tracker { return &tracker{parts: map[topicPartition]*partitionState{}} }

// fetched records that msg is in flight.
func (t *tracker) fetched(msg kafkago.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := topicPartition{msg.Topic, msg.Partition}
	ps := t.parts[tp]
	if ps == nil {
		ps = &partitionState{pending: map[int64]int{}, maxSeen: -1, committed: -1}
		t.parts[tp] = ps
	}
	ps.pending[msg.Offset]++
	if msg.Offset > ps.maxSeen {
		ps.maxSeen = msg.Offset
	}
}

// done records that msg's outcome is final.
func (t *tracker) done(msg kafkago.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.parts[topicPartition{msg.Topic, msg.Partition}]
	if ps == nil {
		return
	}
	if n := ps.pending[msg.Offset]; n > 1 {
		ps.pending[msg.Offset] = n - 1
	} else {
		delete(ps.pending, msg.Offset)
	}
}

// watermark returns the next offset to read of a partition: every offset
// below it is final.
func (ps *partitionState) watermark() int64 {
	next := ps.maxSeen + 1
	for off := range ps.pending {
		if off < next {
			next = off
		}
	}
	return next
}

// committable returns, for each partition whose watermark moved past its
// last commit, a message whose CommitMessages commits that watermark
// (kafka-go commits Offset+1). Sorted for stable logs and tests.
func (t *tracker) committable() []kafkago.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []kafkago.Message
	for tp, ps := range t.parts {
		if w := ps.watermark(); w > ps.committed && w > 0 {
			out = append(out, kafkago.Message{Topic: tp.topic, Partition: tp.partition, Offset: w - 1})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// markCommitted records a successful commit of msgs (as built by committable).
func (t *tracker) markCommitted(msgs []kafkago.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		if ps := t.parts[topicPartition{m.Topic, m.Partition}]; ps != nil && m.Offset+1 > ps.committed {
			ps.committed = m.Offset + 1
		}
	}
}

// inFlight returns the number of fetched events not yet final.
func (t *tracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, ps := range t.parts {
		for _, c := range ps.pending {
			n += c
		}
	}
	return n
}
