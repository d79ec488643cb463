package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unsafe"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	kafkaclient "github.com/acme/billing/infra/kafka"
)

// This file and writer.go are the package's door to kafka-go: they alone
// import it (depguard says so), and turn its messages, generations and
// errors into the package's Record, Generation and errors, and back. This
// file builds the consumer group and the partition readers from the
// cluster's kafkaclient.Access; writer.go writes through infra/kafka's
// Writer.

// Source is a consumer group as the consumer needs it: generations, each
// with the partitions it assigned to this member and their committed
// offsets, and a reader per assigned partition. Offsets are committed only
// through the generation that assigned the partition (Generation.CommitOffsets),
// never by a reader: a reader knows nothing of who owns what.
type Source interface {
	// Next joins the group if this member is not in it (a new source, or
	// one that left) and waits for this member's next generation; once the
	// source is closed it returns ErrSourceClosed.
	Next(ctx context.Context) (Generation, error)
	// OpenPartition returns a reader of one partition starting at offset
	// (an offset, or a negative one the group assigned: see Assignment).
	OpenPartition(topic string, partition int, offset int64) PartitionReader
	// Leave leaves the group, if this member is in it, so that its
	// partitions go to the other members at once; the next Next joins
	// again. The generation it held must have ended (its Start returned).
	Leave() error
}

// PartitionReader fetches the records of one partition in offset order.
type PartitionReader interface {
	Fetch(ctx context.Context) (Record, error)
	Close() error
}

// GroupSource is the Source over kafka-go's ConsumerGroup: the group's
// membership, heartbeats and assignments come from it, and each assigned
// partition is read by its own partition reader. It joins the group on its
// first Next, and again on the first Next after Leave.
type GroupSource struct {
	config kafkago.ConsumerGroupConfig
	fetch  kafkago.ReaderConfig

	mu     sync.Mutex
	group  *kafkago.ConsumerGroup // nil while not in the group
	closed bool
}

var _ Source = (*GroupSource)(nil)

// SourceOption configures a GroupSource.
type SourceOption func(*kafkago.ConsumerGroupConfig)

// WithAnnouncement makes the member announce a in its member metadata, and,
// when it leads the group while members that announce a release it is not
// safe beside are in it (NotSafeBeside), assign every partition to those
// members (docs/design.md, "Releases side by side"). The protocol stays
// kafka-go's "range", which every release of billing offers, so that
// members of any two releases can form one group.
func WithAnnouncement(a Announcement) SourceOption {
	return func(c *kafkago.ConsumerGroupConfig) {
		c.GroupBalancers = []kafkago.GroupBalancer{announcingBalancer{userData: a.Encode(), runsBeside: a.RunsBeside}}
	}
}

// NewClusterSource prepares to join group for topic on the cluster a
// reaches, with o's tuning (zero values: the production defaults below).
// Offsets are committed by the consumer through the group's generation,
// never by a reader. A group that has no committed offset starts at the
// oldest record, so nothing published before the first deployment is
// skipped. Records of aborted transactions are not read (read_committed:
// the filtering itself is in the patched kafka-go under third_party/kafka-go).
func NewClusterSource(a kafkaclient.Access, topic, group string, o kafkaclient.ReaderOptions, opts ...SourceOption) (*GroupSource, error) {
	cfg := kafkago.ReaderConfig{
		Brokers:           a.Brokers,
		GroupID:           group,
		Topic:             topic,
		Dialer:            dialer(a),
		MinBytes:          1,
		MaxBytes:          8 << 20,
		MaxWait:           or(o.MaxWait, 500*time.Millisecond),
		HeartbeatInterval: or(o.HeartbeatInterval, 3*time.Second),
		SessionTimeout:    or(o.SessionTimeout, 30*time.Second),
		RebalanceTimeout:  or(o.RebalanceTimeout, 30*time.Second),
		JoinGroupBackoff:  time.Second,
		ReadBackoffMin:    100 * time.Millisecond,
		ReadBackoffMax:    2 * time.Second,
		// 0 leaves the partition readers' prefetch to NewGroupSource, which
		// keeps it small.
		QueueCapacity:  o.QueueCapacity,
		CommitInterval: 0,
		StartOffset:    kafkago.FirstOffset,
		MaxAttempts:    3,
		IsolationLevel: kafkago.ReadCommitted,
		MaxBatchBytes:  o.MaxBatchBytes,
		Budget:         o.Budget,
	}
	return NewGroupSource(cfg, opts...)
}

// dialer is kafka-go's dialer for the cluster a reaches.
func dialer(a kafkaclient.Access) *kafkago.Dialer {
	d := &kafkago.Dialer{ClientID: a.ClientID, Timeout: a.DialTimeout, DualStack: true, TLS: a.TLS}
	if a.SASL != nil {
		d.SASLMechanism = mechanism{a.SASL}
	}
	return d
}

// mechanism is a kafkaclient.SASLMechanism as kafka-go's: its session is a
// sasl.StateMachine as it is (the two interfaces have the same method).
type mechanism struct{ m kafkaclient.SASLMechanism }

func (m mechanism) Name() string { return m.m.Name() }

func (m mechanism) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	return m.m.Start(ctx)
}

// or is d, or def when d is not positive.
func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// NewGroupSource prepares to join cfg.GroupID for cfg.Topic (or
// cfg.GroupTopics) with cfg's group settings; partition readers take cfg's
// fetch settings and read committed records only (isolation
// read_committed). It checks the configuration and does not dial: the
// first Next joins the group and reports errors. Close leaves the group.
func NewGroupSource(cfg kafkago.ReaderConfig, opts ...SourceOption) (*GroupSource, error) {
	topics := cfg.GroupTopics
	if len(topics) == 0 {
		topics = []string{cfg.Topic}
	}
	start := cfg.StartOffset
	if start == 0 {
		start = kafkago.FirstOffset
	}
	gc := kafkago.ConsumerGroupConfig{
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
	}
	for _, o := range opts {
		o(&gc)
	}
	if err := gc.Validate(); err != nil {
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
		// Bounded input (bounds.go): compressed batches within the
		// configured bound, a record's own headers and the service's, and
		// the process's memory budget charged before anything is decoded.
		MaxBatchBytes:    cfg.MaxBatchBytes,
		MaxRecordHeaders: DecodedRecordHeaders,
		Budget:           cfg.Budget,
	}
	return &GroupSource{config: gc, fetch: fetch}, nil
}

// defaultPartitionQueue is how many records a partition reader decodes
// ahead of the consumer. Each assigned partition has its own reader, and
// with 1 MB records kafka-go's default of 100 let a process prefetch hundreds
// of megabytes; the consumer's byte budget (MaxInFlightBytes) bounds what it
// takes beyond that. A deeper queue buys nothing: when handling is the
// bottleneck the queue is full whatever its size, and when fetching is, it
// is empty.
const defaultPartitionQueue = 1

// Next joins the group if this member is not in it, and waits for its
// next generation.
func (s *GroupSource) Next(ctx context.Context) (Generation, error) {
	g, err := s.joined()
	if err != nil {
		return nil, err
	}
	gen, err := g.Next(ctx)
	if err != nil {
		if errors.Is(err, kafkago.ErrGroupClosed) && s.isClosed() {
			return nil, markedError{err: err, mark: ErrSourceClosed}
		}
		return nil, err
	}
	return groupGeneration{gen}, nil
}

// joined returns the group this member is in, joining it (in the
// background: the group's Next reports how it went) if it is in none.
func (s *GroupSource) joined() (*kafkago.ConsumerGroup, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, markedError{err: kafkago.ErrGroupClosed, mark: ErrSourceClosed}
	}
	if s.group == nil {
		g, err := kafkago.NewConsumerGroup(s.config)
		if err != nil { // NewGroupSource validated the same configuration
			return nil, fmt.Errorf("consumer group %s: %w", s.config.ID, err)
		}
		s.group = g
	}
	return s.group, nil
}

func (s *GroupSource) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// OpenPartition returns a reader of one partition from offset.
func (s *GroupSource) OpenPartition(topic string, partition int, offset int64) PartitionReader {
	cfg := s.fetch
	cfg.Topic, cfg.Partition = topic, partition
	r := kafkago.NewReader(cfg)
	// SetOffset fails only for group readers and closed ones; this is neither.
	_ = r.SetOffset(offset)
	return partitionReader{r: r, budget: cfg.Budget}
}

// Leave leaves the group (kafka-go sends LeaveGroup), if this member is in
// it; the next Next joins again as a new member.
func (s *GroupSource) Leave() error {
	s.mu.Lock()
	g := s.group
	s.group = nil
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.Close()
}

// Close leaves the group and releases its connections; Next then returns
// ErrSourceClosed.
func (s *GroupSource) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.Leave()
}

// announcingBalancer is kafka-go's range balancer with this process's
// Announcement as its user data (WithAnnouncement).
type announcingBalancer struct {
	userData   []byte
	runsBeside string
}

func (b announcingBalancer) ProtocolName() string { return kafkago.RangeGroupBalancer{}.ProtocolName() }

func (b announcingBalancer) UserData() ([]byte, error) { return b.userData, nil }

// AssignGroups assigns by range among every member, or, while members
// that this release is not safe beside are in the group, among those
// members only: the others get nothing, and leave once their release gate
// sees them (ReleaseGate).
func (b announcingBalancer) AssignGroups(members []kafkago.GroupMember, partitions []kafkago.Partition) kafkago.GroupMemberAssignments {
	var unsafe []kafkago.GroupMember
	for _, m := range members {
		if NotSafeBeside(b.runsBeside, m.UserData) {
			unsafe = append(unsafe, m)
		}
	}
	if len(unsafe) == 0 {
		return kafkago.RangeGroupBalancer{}.AssignGroups(members, partitions)
	}
	out := kafkago.RangeGroupBalancer{}.AssignGroups(unsafe, partitions)
	for _, m := range members {
		if _, ok := out[m.ID]; !ok {
			out[m.ID] = map[string][]int{}
		}
	}
	return out
}

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
type partitionReader struct {
	r      *kafkago.Reader
	budget kafkago.Budget // the reader's; nil when it has none
}

func (p partitionReader) Fetch(ctx context.Context) (Record, error) {
	m, err := p.r.FetchMessage(ctx)
	if err != nil {
		return Record{}, err
	}
	rec := recordOf(m)
	if p.budget != nil {
		// The reader charged the message's bytes before decoding it; the
		// record holds them until its outcome is final (Consumer.process).
		rec.held = charge{b: p.budget, n: kafkago.MessageBytes(m)}
	}
	return rec, nil
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
	switch {
	case len(m.Headers) == 1 && m.Headers[0].Key == kafkago.HeadersDroppedKey:
		// The reader decodes at most DecodedRecordHeaders headers of a
		// record: a flood of empty headers would otherwise cost tens of
		// megabytes a record before any budget saw it, with records decoded
		// ahead of the consumer on every partition.
		r.Headers = nil
		r.HeadersDropped, _ = strconv.ParseInt(string(m.Headers[0].Value), 10, 64)
		r.HeadersDropped = max(r.HeadersDropped, DecodedRecordHeaders+1)
	case len(m.Headers) == 1 && m.Headers[0].Key == kafkago.BatchOmittedKey:
		// A record of a compressed batch the reader did not decode: it
		// holds more than BILLING_KAFKA_MAX_BATCH_BYTES once decompressed.
		r.Headers = nil
		r.BatchOmitted = string(m.Headers[0].Value)
	case len(m.Headers) > MaxRecordHeaders:
		if own := ownHeaders(r.Headers); own > MaxRecordHeaders {
			r.Headers = nil
			r.HeadersDropped = int64(own)
		}
	}
	return r
}

// HeadersOfItsOwn says how many headers of its own m carries (as a number,
// "more than N" when the reader skipped them), and false when they are more
// than MaxRecordHeaders: the consumer dead-letters such a record as a stub.
func HeadersOfItsOwn(m kafkago.Message) (string, bool) {
	r := recordOf(m)
	if r.HeadersDropped > 0 {
		return strconv.FormatInt(r.HeadersDropped, 10), false
	}
	return strconv.Itoa(ownHeaders(r.Headers)), true
}

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

// A log read (ReadLog) holds one fetch of up to logFetchBytes (the broker
// still returns a larger record whole); the broker answers within
// logFetchWait, and logFetchDeadline covers a broker that does not answer
// at all.
const (
	logFetchBytes    = 1 << 20
	logFetchWait     = 200 * time.Millisecond
	logFetchDeadline = 10 * time.Second
)

// ReadLog reads partition of topic, on the cluster a reaches, from offset
// from up to end (exclusive) as a read_committed consumer sees it, without
// a consumer group, and calls each with its records in offset order until
// each returns false or an error (which ReadLog returns as it is). A record
// of a compressed batch over maxBatchBytes (0: the default bound) comes as
// its stub (Record.BatchOmitted); one with more headers than the reader
// decodes, without them (Record.HeadersDropped).
//
// It reads fetch by fetch on a connection to the partition's leader rather
// than with a reader: under read_committed the records of aborted
// transactions and the transaction markers are hidden but still take
// offsets, a partition may end with them, and only a fetch tells how far
// it got past them, where a reader would wait for a record that never
// comes.
func ReadLog(ctx context.Context, a kafkaclient.Access, topic string, partition int, from, end int64, maxBatchBytes int,
	each func(Record) (bool, error)) error {
	if from >= end {
		return nil
	}
	conn, err := dialLeader(ctx, a, topic, partition)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	defer conn.Close()
	if _, err := conn.Seek(from, kafkago.SeekAbsolute); err != nil {
		return fmt.Errorf("%s/%d: seek %d: %w", topic, partition, from, err)
	}
	for pos := from; pos < end; {
		if err := conn.SetReadDeadline(time.Now().Add(logFetchDeadline)); err != nil {
			return fmt.Errorf("%s/%d: %w", topic, partition, err)
		}
		b := conn.ReadBatchWith(kafkago.ReadBatchConfig{MinBytes: 1, MaxBytes: logFetchBytes,
			MaxWait: logFetchWait, IsolationLevel: kafkago.ReadCommitted,
			MaxBatchBytes: maxBatchBytes, MaxRecordHeaders: DecodedRecordHeaders})
		for {
			m, err := b.ReadMessage()
			if err != nil {
				break
			}
			if m.Offset < from {
				continue
			}
			more := m.Offset < end
			if more {
				more, err = each(recordOf(m))
			}
			if err != nil || !more {
				_ = b.Close()
				return err
			}
		}
		if err := b.Close(); err != nil && !errors.Is(err, kafkago.RequestTimedOut) {
			return fmt.Errorf("read %s/%d at offset %d: %w", topic, partition, pos, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s/%d at offset %d: %w", topic, partition, pos, err)
		}
		pos = b.Offset()
	}
	return nil
}

// dialLeader connects to the leader of topic's partition through the first
// of a's brokers that answers, within a's dial timeout.
func dialLeader(ctx context.Context, a kafkaclient.Access, topic string, partition int) (*kafkago.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, or(a.DialTimeout, 10*time.Second))
	defer cancel()
	d := dialer(a)
	var errs []error
	for _, b := range a.Brokers {
		conn, err := d.DialLeader(dctx, "tcp", b, topic, partition)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial leader of %s partition %d: %w", topic, partition, errors.Join(errs...))
}
