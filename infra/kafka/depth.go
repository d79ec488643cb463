package kafkaclient

import (
	"context"
	"fmt"
	"slices"

	kafkago "github.com/segmentio/kafka-go"
)

// Records counts the records topic holds, as its brokers see them: the sum
// over partitions of the high-water mark minus the log start offset. For the
// DLQ it is the depth that stays up after a dead letter (until retention or
// an operator removes it), and it is read with no consumer running.
func (c *Cluster) Records(ctx context.Context, topic string) (int64, error) {
	cl, done := c.client()
	defer done()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("kafka metadata: %w", err)
	}
	var reqs []kafkago.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return 0, fmt.Errorf("topic %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafkago.LastOffsetOf(p.ID), kafkago.FirstOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return 0, fmt.Errorf("topic %s: no partitions", topic)
	}
	lo, err := cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return 0, fmt.Errorf("list offsets %s: %w", topic, err)
	}
	var n int64
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			// A partition missing from the sum would make the depth drop
			// and an alert on it resolve: report nothing instead.
			return 0, fmt.Errorf("list offsets %s/%d: %w", topic, p.Partition, p.Error)
		}
		if d := p.LastOffset - p.FirstOffset; d > 0 {
			n += d
		}
	}
	return n, nil
}

// PartitionOffsets is one partition's log as a read_committed consumer
// sees it now: its first offset, and End, its last stable offset (short of
// a transaction still open).
type PartitionOffsets struct {
	Partition int
	First     int64
	End       int64
}

// Offsets returns the PartitionOffsets of the given partitions of topic,
// or of all its partitions when none is given, ordered by partition. A
// partition the brokers report an error for, or leave out, is an error.
func (c *Cluster) Offsets(ctx context.Context, topic string, partitions ...int) ([]PartitionOffsets, error) {
	cl, done := c.client()
	defer done()
	if len(partitions) == 0 {
		md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return nil, fmt.Errorf("kafka metadata: %w", err)
		}
		for _, t := range md.Topics {
			if t.Name != topic {
				continue
			}
			if t.Error != nil {
				return nil, fmt.Errorf("topic %s: %w", topic, t.Error)
			}
			for _, p := range t.Partitions {
				partitions = append(partitions, p.ID)
			}
		}
	}
	reqs := make([]kafkago.OffsetRequest, 0, 2*len(partitions))
	for _, p := range partitions {
		reqs = append(reqs, kafkago.FirstOffsetOf(p), kafkago.LastOffsetOf(p))
	}
	lo, err := cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{IsolationLevel: kafkago.ReadCommitted,
		Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets %s: %w", topic, err)
	}
	got := map[int]kafkago.PartitionOffsets{}
	for _, p := range lo.Topics[topic] {
		got[p.Partition] = p
	}
	out := make([]PartitionOffsets, 0, len(partitions))
	for _, id := range partitions {
		p, ok := got[id]
		switch {
		case !ok:
			return nil, fmt.Errorf("offsets of %s/%d: not in the reply", topic, id)
		case p.Error != nil:
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, id, p.Error)
		}
		out = append(out, PartitionOffsets{Partition: id, First: p.FirstOffset, End: p.LastOffset})
	}
	slices.SortFunc(out, func(a, b PartitionOffsets) int { return a.Partition - b.Partition })
	return out, nil
}
