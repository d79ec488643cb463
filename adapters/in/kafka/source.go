package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	kafkago "github.com/segmentio/kafka-go"
)

// This file and writer.go are the package's door to kafka-go: they alone
// import it (depguard says so), and turn its messages, generations and
// errors into the package's Record, Generation and errors, and back.

// Source is a consumer group as the consumer needs it: generations, each
// with the partitions it assigned to this member and their committed
// offsets, and a reader per assigned partition. Offsets are committed only
// through the generation that assigned the partition (Generation.CommitOffsets),
// never by a reader: a reader knows nothing of who owns what.
type Source interface {
	// Next waits for this member's next generation; once the source is
	// closed it returns ErrSourceClosed.
	Next(ctx context.Context) (Generation, error)
	// OpenPartition returns a reader of one partition starting at offset
	// (an offset, or a negative one the group assigned: see Assignment).
	OpenPartition(topic string, partition int, offset int64) PartitionReader
}

// PartitionReader fetches the records of one partition in offset order.
type PartitionReader interface {
	Fetch(ctx context.Context) (Record, error)
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
func (s *GroupSource) Next(ctx context.Context) (Generation, error) {
	gen, err := s.group.Next(ctx)
	if err != nil {
		if errors.Is(err, kafkago.ErrGroupClosed) {
			return nil, markedError{err: err, mark: ErrSourceClosed}
		}
		return nil, err
	}
	return groupGeneration{gen}, nil
}

// OpenPartition returns a reader of one partition from offset.
func (s *GroupSource) OpenPartition(topic string, partition int, offset int64) PartitionReader {
	cfg := s.fetch
	cfg.Topic, cfg.Partition = topic, partition
	r := kafkago.NewReader(cfg)
	// SetOffset fails only for group readers and closed ones; this is neither.
	_ = r.SetOffset(offset)
	return partitionReader{r}
}

// Close leaves the group and releases its connections.
func (s *GroupSource) Close() error { return s.group.Close() }

// groupGeneration is a kafka-go generation as a Generation.
type groupGeneration struct{ g *kafkago.Generation }

func (g groupGeneration) ID() int32 { return g.g.ID }

func (g groupGeneration) Assignments() []Assignment {
	var out []Assignment
	for topic, parts := range g.g.Assignments {
		for _, p := range parts {
			out = append(out, Assignment{Topic: topic, Partition: p.ID, Offset: p.Offset})
		}
	}
	return out
}

func (g groupGeneration) Start(fn func(ctx context.Context)) { g.g.Start(fn) }

func (g groupGeneration) CommitOffsets(offsets map[string]map[int]int64) error {
	return g.g.CommitOffsets(offsets)
}

// partitionReader is a kafka-go reader without a group as a PartitionReader.
type partitionReader struct{ r *kafkago.Reader }

func (p partitionReader) Fetch(ctx context.Context) (Record, error) {
	m, err := p.r.FetchMessage(ctx)
	if err != nil {
		return Record{}, err
	}
	return recordOf(m), nil
}

func (p partitionReader) Close() error { return p.r.Close() }

// recordOf is a fetched message as a Record, sharing its bytes: the key,
// the value, the headers' keys and values, and the headers' array itself
// (see headersOf). The message is dropped right after, so the record holds
// what the message held, no more (recordBytes counts it), and the
// conversion allocates nothing.
func recordOf(m kafkago.Message) Record {
	r := Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value,
		Headers: headersOf(m.Headers), Time: m.Time}
	if len(m.Headers) == 1 && m.Headers[0].Key == kafkago.HeadersDroppedKey {
		// The reader decodes at most kafkago.MaxRecordHeaders headers of a
		// record: a flood of empty headers would otherwise cost tens of
		// megabytes a record before any budget saw it, with records decoded
		// ahead of the consumer on every partition.
		r.Headers = nil
		r.HeadersDropped, _ = strconv.ParseInt(string(m.Headers[0].Value), 10, 64)
		r.HeadersDropped = max(r.HeadersDropped, kafkago.MaxRecordHeaders+1)
	}
	return r
}

// MaxRecordHeaders is the most headers a record may carry: a record with
// more is dead-lettered as a stub (Record.HeadersDropped).
const MaxRecordHeaders = kafkago.MaxRecordHeaders

// The package's Header and kafka-go's have identical underlying types (this
// conversion compiles only while they do), and so the same memory layout:
// a slice of one may be read as a slice of the other (unsafe.Pointer's
// rule 1). headersOf and kafkaHeaders rely on it.
var _ = Header(kafkago.Header{})

// headersOf is hs as the package's headers, sharing hs's array: a copy
// would allocate a second array per record (40 bytes a header, 18 MB for a
// record of 450,000 empty ones) on the hot path.
func headersOf(hs []kafkago.Header) []Header {
	//nolint:gosec // G103: the types are identical (checked above), so the reinterpretation is sound
	return unsafe.Slice((*Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}
