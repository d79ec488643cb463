package kafkaclient

import (
	"context"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
)

// Records counts the records topic holds, as its brokers see them: the sum
// over partitions of the high-water mark minus the log start offset. For the
// DLQ it is the depth that stays up after a dead letter (until retention or
// an operator removes it), and it is read with no consumer running.
func (c *Cluster) Records(ctx context.Context, topic string) (int64, error) {
	cl, done := c.Client()
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
