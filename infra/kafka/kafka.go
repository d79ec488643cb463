// Package kafkaclient builds billing's Kafka clients from configuration
// (brokers, client id, TLS, SASL), writes records, creates the service's
// own topics where the cluster allows it, and reads what the brokers say
// (partitions, offsets, lag, consumer groups). It owns connections; what
// flows through them is adapters/in/kafka's job. The layout fixes its
// folder, infra/kafka; its name differs so that it reads apart from that
// adapter (package kafka) and from kafka-go (package kafka) in a file that
// imports them together.
//
// It is one of kafka-go's doors (README, "Layout"; depguard's
// kafka-go-behind-its-doors rule): it imports kafka-go, and its exported
// API speaks only the project's own types (Access, Message, Header,
// Budget, PartitionOffsets, GroupDescription) and the standard library's,
// so that no caller needs kafka-go to use it.
package kafkaclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Settings is how to reach the cluster.
type Settings struct {
	Brokers       []string
	ClientID      string
	TLS           bool
	TLSCAFile     string
	SASLMechanism string // "", "plain", "scram-sha-256", "scram-sha-512"
	SASLUsername  string
	SASLPassword  string // never logged: Settings has no String and is not logged
}

// Cluster is how to reach the Kafka cluster: the brokers, the client id and
// what every client shares, the TLS config and the SASL mechanism, built
// once. It holds no connection: each writer, client or ping it makes, and
// each reader built from its Access, dials on its own.
type Cluster struct {
	brokers  []string
	clientID string
	tls      *tls.Config
	sasl     sasl.Mechanism
}

// dialTimeout bounds one connection's dial, TLS and SASL handshakes.
const dialTimeout = 10 * time.Second

// ErrSASLCredentials is wrapped by NewCluster's error when the SASL user name
// or password cannot be used at all (SCRAM's SASLprep refuses them).
var ErrSASLCredentials = errors.New("kafka: unusable SASL credentials")

// NewCluster checks s and prepares TLS and SASL. It does not dial.
func NewCluster(s Settings) (*Cluster, error) {
	if len(s.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers")
	}
	c := &Cluster{brokers: s.Brokers, clientID: s.ClientID}
	if s.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.TLSCAFile != "" {
			pem, err := os.ReadFile(s.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: read TLS CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka: TLS CA file %s holds no PEM certificate", s.TLSCAFile)
			}
			cfg.RootCAs = pool
		}
		c.tls = cfg
	}
	switch s.SASLMechanism {
	case "":
	case "plain":
		c.sasl = plain.Mechanism{Username: s.SASLUsername, Password: s.SASLPassword}
	case "scram-sha-256", "scram-sha-512":
		algo := scram.SHA256
		if s.SASLMechanism == "scram-sha-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, s.SASLUsername, s.SASLPassword)
		if err != nil {
			// The SCRAM library's error quotes the password it could not
			// prepare (SASLprep): never pass its text on.
			return nil, fmt.Errorf("%w: SASL %s: SASLprep refused the user name or password (details withheld: they quote the password)",
				ErrSASLCredentials, s.SASLMechanism)
		}
		c.sasl = m
	default:
		return nil, fmt.Errorf("kafka: unknown SASL mechanism %q", s.SASLMechanism)
	}
	return c, nil
}

// Brokers returns the bootstrap brokers.
func (c *Cluster) Brokers() []string { return c.brokers }

// dialer returns a dialer for connections to one broker.
func (c *Cluster) dialer() *kafkago.Dialer {
	return &kafkago.Dialer{
		ClientID:      c.clientID,
		Timeout:       dialTimeout,
		DualStack:     true,
		TLS:           c.tls,
		SASLMechanism: c.sasl,
	}
}

// transport returns a new transport for a Writer or a Client. Each owner
// closes its own (CloseIdleConnections) so no goroutine outlives it.
func (c *Cluster) transport() *kafkago.Transport {
	return &kafkago.Transport{
		ClientID:    c.clientID,
		DialTimeout: dialTimeout,
		IdleTimeout: 30 * time.Second,
		MetadataTTL: 15 * time.Second,
		TLS:         c.tls,
		SASL:        c.sasl,
	}
}

// client returns an admin/metadata client over its own transport, and a
// function that releases the transport's connections.
func (c *Cluster) client() (*kafkago.Client, func()) {
	t := c.transport()
	return &kafkago.Client{Addr: kafkago.TCP(c.brokers...), Transport: t, Timeout: 10 * time.Second},
		t.CloseIdleConnections
}

// ReaderOptions tunes a group reader (adapters/in/kafka builds it from the
// cluster's Access). Zero values take production defaults.
type ReaderOptions struct {
	MaxWait           time.Duration
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	QueueCapacity     int
	// MaxBatchBytes bounds what a compressed batch may hold once
	// decompressed (BILLING_KAFKA_MAX_BATCH_BYTES; 0: the reader's default,
	// the same 32 MiB), and Budget, when set, is charged with what the
	// readers decode before they decode it (the process's one budget, see
	// adapters/in/kafka.MemoryBudget).
	MaxBatchBytes int
	Budget        Budget
}

// Budget is memory that a reader charges before it decodes: each record's
// bytes, and a compressed batch's before it is decompressed.
type Budget interface {
	// AcquireRecord takes n bytes for one record about to be decoded (or
	// its stub).
	AcquireRecord(ctx context.Context, n int64) error
	// ReleaseRecord gives back n bytes of records' charges.
	ReleaseRecord(n int64)
	// AcquireBatch takes n bytes for a compressed batch: its compressed
	// bytes, then those and its decompressed size. The reader holds nothing
	// else of the budget when it asks.
	AcquireBatch(ctx context.Context, n int64) error
	// ReleaseBatch gives back n bytes of a batch's charges.
	ReleaseBatch(n int64)
}

// Writer is the producer of routed records (retry tiers, DLQ, replay).
// kafka-go's Writer merges the records of concurrent WriteMessages calls
// into one batch per partition, and a broker refuses such a batch as a
// whole when it exceeds the topic's max.message.bytes or holds one record
// that does. So small records go through a writer whose batches stay below
// Kafka's default 1 MiB limit, and a large one is sent in a batch and a
// request of its own, where a refusal is about that record only.
type Writer struct {
	batched, solo *kafkago.Writer
}

// Batches of the batched writer stay below Kafka's default max.message.bytes
// (1,048,588) with room for kafka-go's framing; records over soloAbove are
// written alone, up to soloBatchBytes (a record over that is refused by
// kafka-go before it is sent: kafka.MessageTooLargeError).
const (
	batchedBatchBytes = 1_000_000
	soloAbove         = 900_000
	soloBatchBytes    = 16 << 20
)

// WriteMessages writes msgs in order, the small ones batched with other
// concurrent writes, each large one alone. Its errors are kafka-go's: a
// broker's refusal unwraps to its error code, which adapters/in/kafka's
// writer.go tells apart.
func (w *Writer) WriteMessages(ctx context.Context, msgs ...Message) error {
	ms := messages(msgs)
	start := 0
	for i, m := range ms {
		if size(m) <= soloAbove {
			continue
		}
		if start < i {
			if err := w.batched.WriteMessages(ctx, ms[start:i]...); err != nil {
				return err
			}
		}
		if err := w.solo.WriteMessages(ctx, m); err != nil {
			return err
		}
		start = i + 1
	}
	if start == len(ms) {
		return nil
	}
	return w.batched.WriteMessages(ctx, ms[start:]...)
}

// WriteAlone writes msg in a batch that holds nothing else.
func (w *Writer) WriteAlone(ctx context.Context, msg Message) error {
	return w.solo.WriteMessages(ctx, msg.kafka())
}

// size is a record's bytes on the wire, less a few bytes of framing.
func size(m kafkago.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// partitioner chooses partitions as Kafka's Java client does: murmur2 of
// the key, positive, modulo the partition count; records without a key go
// to a random partition, as the Java client's sticky partitioner spreads
// them (docs/interface.md §5: a key stays on the partition its producers chose).
func partitioner() kafkago.Balancer { return &kafkago.Murmur2Balancer{} }

// NewWriter returns a producer for routed records (retry tiers, DLQ, replay):
// the topic is set per message, RequireAll so that an acknowledged write
// survives a broker loss, murmur2 so a key keeps its partition. The
// returned function closes the writer and its transports.
func (c *Cluster) NewWriter() (*Writer, func() error) {
	newW := func(batchSize int, batchBytes int64) (*kafkago.Writer, *kafkago.Transport) {
		t := c.transport()
		return &kafkago.Writer{
			Addr:                   kafkago.TCP(c.brokers...),
			Balancer:               partitioner(),
			RequiredAcks:           kafkago.RequireAll,
			MaxAttempts:            3,
			WriteBackoffMin:        50 * time.Millisecond,
			WriteBackoffMax:        time.Second,
			BatchSize:              batchSize,
			BatchTimeout:           2 * time.Millisecond,
			BatchBytes:             batchBytes,
			WriteTimeout:           10 * time.Second,
			ReadTimeout:            10 * time.Second,
			AllowAutoTopicCreation: false,
			Transport:              t,
		}, t
	}
	batched, bt := newW(0, batchedBatchBytes)
	solo, st := newW(1, soloBatchBytes)
	return &Writer{batched: batched, solo: solo}, func() error {
		err := errors.Join(batched.Close(), solo.Close())
		bt.CloseIdleConnections()
		st.CloseIdleConnections()
		return err
	}
}

// Ping connects to the brokers in turn, with TLS and SASL, and returns nil
// as soon as one accepts. It dials rather than sending a request through a
// Transport so that a refused SASL login comes back as the broker's error
// (SASLRefused), not as a dropped connection.
func (c *Cluster) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	for _, b := range c.brokers {
		conn, err := c.dialer().DialContext(ctx, "tcp", b)
		if err == nil {
			return conn.Close()
		}
		errs = append(errs, fmt.Errorf("kafka %s: %w", b, err))
	}
	return oneLineErrors(errs)
}

// oneLineErrors is errors.Join on one line: errors end up in log lines and
// in the one-line message of a failed start.
type oneLineErrors []error

func (e oneLineErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e oneLineErrors) Unwrap() []error { return e }

// TopicSpec is a topic the service wants to exist.
type TopicSpec struct {
	Name       string
	Partitions int
	Configs    map[string]string
	// MinMaxMessageBytes, when set, is the least max.message.bytes the
	// topic must accept: a new topic is created with it, an existing one
	// below it is raised to it.
	MinMaxMessageBytes int
}

// EnsureTopics creates the topics that do not exist yet and raises
// max.message.bytes where a spec asks for it. A topic that exists is
// otherwise left as it is; a cluster that refuses creation (ACLs, auto
// creation managed elsewhere) is reported in the returned error only when
// the topic is still missing afterwards, and a refused raise is reported.
func (c *Cluster) EnsureTopics(ctx context.Context, specs []TopicSpec) error {
	err := c.createTopics(ctx, specs)
	raise := map[string]int{}
	for _, s := range specs {
		if s.MinMaxMessageBytes > 0 {
			raise[s.Name] = s.MinMaxMessageBytes
		}
	}
	if len(raise) == 0 {
		return err
	}
	return oneLineErrors{err, c.raiseMaxMessageBytes(ctx, raise)}.orNil()
}

func (c *Cluster) createTopics(ctx context.Context, specs []TopicSpec) error {
	cl, done := c.client()
	defer done()
	req := &kafkago.CreateTopicsRequest{}
	for _, s := range specs {
		tc := kafkago.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: -1}
		for k, v := range s.Configs {
			tc.ConfigEntries = append(tc.ConfigEntries, kafkago.ConfigEntry{ConfigName: k, ConfigValue: v})
		}
		if s.MinMaxMessageBytes > 0 {
			tc.ConfigEntries = append(tc.ConfigEntries, kafkago.ConfigEntry{
				ConfigName: MaxMessageBytesConfig, ConfigValue: strconv.Itoa(s.MinMaxMessageBytes)})
		}
		req.Topics = append(req.Topics, tc)
	}
	res, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	var errs []error
	for name, terr := range res.Errors {
		if terr == nil || errors.Is(terr, kafkago.TopicAlreadyExists) {
			continue
		}
		errs = append(errs, fmt.Errorf("create topic %s: %w", name, terr))
	}
	if len(errs) == 0 {
		return nil
	}
	// Creation refused: fine if the topics exist anyway.
	parts, merr := c.Partitions(ctx, names(specs)...)
	if merr == nil && len(parts) == len(specs) {
		return nil
	}
	return errors.Join(errs...)
}

// Partitions returns the partition count of each topic that exists.
func (c *Cluster) Partitions(ctx context.Context, topics ...string) (map[string]int, error) {
	cl, done := c.client()
	defer done()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	out := make(map[string]int, len(md.Topics))
	for _, t := range md.Topics {
		if t.Error == nil && len(t.Partitions) > 0 {
			out[t.Name] = len(t.Partitions)
		}
	}
	return out, nil
}

// Lag returns, per partition of topic, how many records lie between the
// group's committed offset and the high-water mark. A partition the group
// never committed counts from the log start. Where that span is short
// (markerSpan offsets or fewer), the records in it are counted one by one
// as a read_committed consumer receives them: a transaction's marker, and
// the records of an aborted transaction, take offsets that no consumer is
// given, so a group that has billed everything there is to bill commits
// before them and would otherwise stay one or more behind for good (and
// BillingNotConsuming fire). A longer span is reported as it is: markers
// are then a small error on a lag that means something anyway.
func (c *Cluster) Lag(ctx context.Context, group, topic string) (map[int]int64, error) {
	pos, err := c.Positions(ctx, group, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(pos))
	for p, v := range pos {
		out[p] = v.Lag
	}
	return out, nil
}

// Position is where a consumer group stands on one partition.
type Position struct {
	Committed int64 // the group's committed offset; the log start while it has committed none
	Lag       int64 // as Lag counts it
}

// Positions returns, per partition of topic, the group's committed offset
// and its lag (see Lag), from one set of broker answers.
func (c *Cluster) Positions(ctx context.Context, group, topic string) (map[int]Position, error) {
	cl, done := c.client()
	defer done()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("kafka metadata: %w", err)
	}
	var reqs []kafkago.OffsetRequest
	var ids []int
	for _, t := range md.Topics {
		if t.Name != topic || t.Error != nil {
			continue
		}
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
			reqs = append(reqs, kafkago.LastOffsetOf(p.ID), kafkago.FirstOffsetOf(p.ID))
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("topic %s: no partitions", topic)
	}
	lo, err := cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets %s: %w", topic, err)
	}
	of, err := cl.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err != nil {
		return nil, fmt.Errorf("offset fetch %s: %w", group, err)
	}
	if of.Error != nil {
		return nil, fmt.Errorf("offset fetch %s: %w", group, of.Error)
	}
	committed := map[int]int64{}
	for _, p := range of.Topics[topic] {
		if p.Error == nil {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	out := make(map[int]Position, len(ids))
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			continue
		}
		from, ok := committed[p.Partition]
		if !ok || from < 0 {
			from = p.FirstOffset
		}
		lag := max(p.LastOffset-from, 0)
		if lag > 0 && lag <= markerSpan {
			if n, err := c.records(ctx, topic, p.Partition, from, p.LastOffset); err == nil {
				lag = n
			}
		}
		out[p.Partition] = Position{Committed: from, Lag: lag}
	}
	return out, nil
}

// markerSpan is the longest span of offsets whose records Lag counts one
// by one: one fetch, a few times a minute, and only for a partition whose
// group is nearly caught up.
const markerSpan = 64

// records counts the records of partition in [from, to) that a
// read_committed consumer receives. Offsets past the last stable offset (an
// open transaction) count as records: they may still be committed. Errors
// leave the caller with the plain difference of offsets.
func (c *Cluster) records(ctx context.Context, topic string, partition int, from, to int64) (int64, error) {
	conn, err := c.dialLeader(ctx, topic, partition)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.Seek(from, kafkago.SeekAbsolute); err != nil {
		return 0, err
	}
	var n int64
	for pos := from; ; {
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return 0, err
		}
		// A compressed batch is counted without being decompressed: past
		// a bound of one byte, each of its offsets comes back as a stub,
		// which is a record here as for the consumer.
		b := conn.ReadBatchWith(kafkago.ReadBatchConfig{MinBytes: 1, MaxBytes: 1 << 20,
			MaxWait: 100 * time.Millisecond, IsolationLevel: kafkago.ReadCommitted, MaxBatchBytes: 1})
		for {
			m, err := b.ReadMessage()
			if err != nil || m.Offset >= to {
				break
			}
			n++
		}
		err := b.Close()
		if err != nil && !errors.Is(err, kafkago.RequestTimedOut) {
			return 0, err
		}
		next := b.Offset()
		if next >= to || next <= pos {
			// Done, or nothing more to read: the rest lies past the last
			// stable offset.
			return n + max(to-next, 0), nil
		}
		pos = next
	}
}

// dialLeader connects to the leader of topic's partition through the first
// broker that answers, within dialTimeout.
func (c *Cluster) dialLeader(ctx context.Context, topic string, partition int) (*kafkago.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var errs []error
	for _, b := range c.brokers {
		conn, err := c.dialer().DialLeader(dctx, "tcp", b, topic, partition)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial leader of %s partition %d: %w", topic, partition, errors.Join(errs...))
}

func names(specs []TopicSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}
