package kafka

import (
	"context"
	"fmt"

	kafkago "github.com/segmentio/kafka-go"
)

// Source is a consumer group as the consumer needs it: generations, each
// with the partitions it assigned to this member and their committed
// offsets, and a reader per assigned partition. Offsets are committed only
// through the generation that assigned the partition (Generation.CommitOffsets),
// never by a reader: a reader knows nothing of who owns what.
type Source interface {
	// Next waits for this member's next generation.
	Next(ctx context.Context) (*kafkago.Generation, error)
	// OpenPartition returns a reader of one partition starting at offset
	// (an offset or kafka-go's FirstOffset/LastOffset).
	OpenPartition(topic string, partition int, offset int64) PartitionReader
}

// PartitionReader fetches the records of one partition in offset order.
// *kafka.Reader without a GroupID is one.
type PartitionReader interface {
	FetchMessage(ctx context.Context) (kafkago.Message, error)
	Close() error
}

// GroupSource is the Source over kafka-go's ConsumerGroup: the group's
// membership, heartbeats and assignments come from it, and each assigned
// partition is read by its own partition reader.
type GroupSource struct {
	group *kafkago.ConsumerGroup
	fetch kafkago.ReaderConfig
}

var _ Source = (*GroupSource)(nil)

// NewGroupSource joins cfg.GroupID for cfg.Topic (or cfg.GroupTopics) with
// cfg's group settings; partition readers take cfg's fetch settings and read
// committed records only (isolation read_committed). It does not dial: the
// group connects in the background and reports errors through Next. Close
// leaves the group.
func NewGroupSource(cfg kafkago.ReaderConfig) (*GroupSource, error) {
	topics := cfg.GroupTopics
	if len(topics) == 0 {
		topics = []string{cfg.Topic}
	}
	start := cfg.StartOffset
	if start == 0 {
		start = kafkago.FirstOffset
	}
	g, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID:                     cfg.GroupID,
		Brokers:                cfg.Brokers,
		Dialer:                 cfg.Dialer,
		Topics:                 topics,
		GroupBalancers:         cfg.GroupBalancers,
		HeartbeatInterval:      cfg.HeartbeatInterval,
		PartitionWatchInterval: cfg.PartitionWatchInterval,
		WatchPartitionChanges:  cfg.WatchPartitionChanges,
		SessionTimeout:         cfg.SessionTimeout,
		RebalanceTimeout:       cfg.RebalanceTimeout,
		JoinGroupBackoff:       cfg.JoinGroupBackoff,
		RetentionTime:          cfg.RetentionTime,
		StartOffset:            start,
		Logger:                 cfg.Logger,
		ErrorLogger:            cfg.ErrorLogger,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer group %s: %w", cfg.GroupID, err)
	}
	queue := cfg.QueueCapacity
	if queue <= 0 {
		queue = defaultPartitionQueue
	}
	fetch := kafkago.ReaderConfig{
		Brokers:        cfg.Brokers,
		Dialer:         cfg.Dialer,
		MinBytes:       cfg.MinBytes,
		MaxBytes:       cfg.MaxBytes,
		MaxWait:        cfg.MaxWait,
		ReadBackoffMin: cfg.ReadBackoffMin,
		ReadBackoffMax: cfg.ReadBackoffMax,
		QueueCapacity:  queue,
		MaxAttempts:    cfg.MaxAttempts,
		IsolationLevel: kafkago.ReadCommitted,
		Logger:         cfg.Logger,
		ErrorLogger:    cfg.ErrorLogger,
	}
	return &GroupSource{group: g, fetch: fetch}, nil
}

// defaultPartitionQueue is how many records a partition reader decodes
// ahead of the consumer. Each assigned partition has its own reader, and
// with 1 MB records kafka-go's default of 100 let a process prefetch hundreds
// of megabytes; the consumer's byte budget (MaxInFlightBytes) bounds what it
// takes beyond that. A deeper queue buys nothing: when handling is the
// bottleneck the queue is full whatever its size, and when fetching is, it
// is empty.
const defaultPartitionQueue = 1

// Next waits for this member's next generation.
func (s *GroupSource) Next(ctx context.Context) (*kafkago.Generation, error) {
	return s.group.Next(ctx)
}

// OpenPartition returns a reader of one partition from offset.
func (s *GroupSource) OpenPartition(topic string, partition int, offset int64) PartitionReader {
	cfg := s.fetch
	cfg.Topic, cfg.Partition = topic, partition
	r := kafkago.NewReader(cfg)
	// SetOffset fails only for group readers and closed ones; this is neither.
	_ = r.SetOffset(offset)
	return r
}

// Close leaves the group and releases its connections.
func (s *GroupSource) Close() error { return s.group.Close() }
