package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkaclient "github.com/acme/billing/infra/kafka"
)

// opTimeout bounds each admin call of the helpers below.
const opTimeout = 30 * time.Second

// UniqueName returns prefix, the test's name and a random suffix joined into a
// valid topic or group name, so that tests sharing a broker ([SharedReal]),
// and repeated runs with -count, never meet in the same topic.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("kafkatest: random name: %v", err)
	}
	name := strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, prefix+"."+t.Name())
	const maxLen = 249 - 9 // Kafka's limit on topic names, less the suffix
	if len(name) > maxLen {
		name = name[:maxLen]
	}
	return name + "." + hex.EncodeToString(b[:])
}

// The timings of a group member that joins, heartbeats and notices
// rebalances in a fraction of a second, against [NewFake] or a real broker
// from this package (both accept session timeouts down to 100 ms and
// 500 ms). The session is long enough for a -race run on a loaded two-core
// machine to keep heartbeating, short enough that a vanished member is gone
// quickly.
const (
	fastMaxWait   = 100 * time.Millisecond
	fastHeartbeat = 100 * time.Millisecond
	fastSession   = 2 * time.Second
)

// FastReaderConfig returns a group reader configuration with the fast
// timings above, for tests that build kafka-go readers themselves. Offsets
// are committed synchronously by CommitMessages (CommitInterval 0) and a new
// group starts at the first offset.
func FastReaderConfig(brokers []string, group, topic string) kafkago.ReaderConfig {
	return kafkago.ReaderConfig{
		Brokers:           append([]string(nil), brokers...),
		GroupID:           group,
		Topic:             topic,
		MinBytes:          1,
		MaxBytes:          10 << 20,
		MaxWait:           fastMaxWait,
		ReadBackoffMin:    10 * time.Millisecond,
		ReadBackoffMax:    100 * time.Millisecond,
		HeartbeatInterval: fastHeartbeat,
		SessionTimeout:    fastSession,
		RebalanceTimeout:  fastSession,
		JoinGroupBackoff:  100 * time.Millisecond,
		CommitInterval:    0,
		StartOffset:       kafkago.FirstOffset,
	}
}

// FastReaderOptions returns the same fast timings as options of billing's
// own reader construction (infra/kafka), for tests and the demo that run
// the service in process (internal/app.Tuning.Reader).
func FastReaderOptions() kafkaclient.ReaderOptions {
	return kafkaclient.ReaderOptions{
		MaxWait:           fastMaxWait,
		HeartbeatInterval: fastHeartbeat,
		SessionTimeout:    fastSession,
		RebalanceTimeout:  fastSession,
	}
}

// NewWriter returns a writer for topic with its own transport, both closed
// when the test ends (goleak reports a writer's connections otherwise).
// Records with the same key go to the same partition (kafkago.Hash), a write
// returns once all in-sync replicas have it, and batches leave after 1 ms.
func NewWriter(t testing.TB, brokers []string, topic string) *kafkago.Writer {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(brokers...),
		Topic:        topic,
		Balancer:     &kafkago.Hash{},
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafkago.RequireAll,
		Transport:    tr,
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("kafkatest: close writer for %s: %v", topic, err)
		}
		tr.CloseIdleConnections()
	})
	return w
}

// CreateTopics creates topics with the given number of partitions (replication
// factor 1) and waits until every partition has a leader. A topic that already
// exists with that many partitions is fine.
func CreateTopics(t testing.TB, brokers []string, partitions int, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	client, done := newClient(brokers)
	defer done()

	req := &kafkago.CreateTopicsRequest{}
	for _, topic := range topics {
		req.Topics = append(req.Topics, kafkago.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1})
	}
	res, err := client.CreateTopics(ctx, req)
	if err != nil {
		t.Fatalf("kafkatest: create topics %v: %v", topics, err)
	}
	for topic, err := range res.Errors {
		if err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
			t.Fatalf("kafkatest: create topic %s: %v", topic, err)
		}
	}

	var last error
	ok := poll(ctx, func() bool {
		for _, topic := range topics {
			parts, err := partitionsOf(ctx, brokers, topic)
			if err != nil {
				last = err
				return false
			}
			if len(parts) != partitions {
				last = fmt.Errorf("topic %s has %d partitions, want %d", topic, len(parts), partitions)
				return false
			}
			if err := leadersServe(ctx, client, topic, parts); err != nil {
				last = err
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("kafkatest: topics %v not ready: %v", topics, last)
	}
}

// ReadAll waits until topic holds at least n records, then reads every
// partition, without a consumer group, from its first offset to the end
// offset it had at that moment, and returns those records ordered by
// partition and offset: n or more of them, so duplicates that an
// at-least-once writer left are kept. It fails the test if that takes longer
// than timeout. (It counts offsets, so it suits topics without transactions.)
// Records of a compressed batch over kafka-go's default bound
// (kafkago.DefaultMaxBatchBytes) come back as its stubs
// (kafkago.BatchOmittedKey).
func ReadAll(t testing.TB, brokers []string, topic string, n int, timeout time.Duration) []kafkago.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	var first, end map[int]int64
	var held int64
	var last error
	ok := poll(ctx, func() bool {
		if first, end, last = offsetRange(ctx, brokers, topic); last != nil {
			return false
		}
		held = 0
		for p := range end {
			held += end[p] - first[p]
		}
		return held >= int64(n)
	})
	if !ok {
		t.Fatalf("kafkatest: %s holds %d of %d records after %v (last error: %v)", topic, held, n, timeout, last)
	}

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		msgs  []kafkago.Message
		short []string
	)
	for p := range end {
		if end[p] <= first[p] {
			continue
		}
		wg.Go(func() {
			got, err := readPartition(ctx, brokers, topic, p, first[p], end[p])
			mu.Lock()
			defer mu.Unlock()
			msgs = append(msgs, got...)
			if err != nil {
				short = append(short, fmt.Sprintf("partition %d: %d of offsets [%d, %d): %v", p, len(got), first[p], end[p], err))
			}
		})
	}
	wg.Wait()
	if len(short) > 0 {
		slices.Sort(short)
		t.Fatalf("kafkatest: read %s: %s", topic, strings.Join(short, "; "))
	}
	slices.SortFunc(msgs, func(a, b kafkago.Message) int {
		if a.Partition != b.Partition {
			return a.Partition - b.Partition
		}
		return int(a.Offset - b.Offset)
	})
	return msgs
}

// readPartition reads the records of one partition in offsets [from, to).
func readPartition(ctx context.Context, brokers []string, topic string, partition int, from, to int64) ([]kafkago.Message, error) {
	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:   brokers,
		Topic:     topic,
		Partition: partition,
		MinBytes:  1,
		MaxBytes:  10 << 20,
		// The reader gives each fetch's reply MaxWait to start arriving and
		// fetches again after a timeout: under -race on a loaded machine a
		// reply of megabytes took longer than 100 ms every time, and the read
		// never progressed. The records are there (ReadAll waited for them),
		// so the broker answers at once and a longer wait costs nothing.
		MaxWait:        2 * time.Second,
		ReadBackoffMax: 100 * time.Millisecond,
		// A test reads every header a record carries (the service's
		// readers stop at its own bound, well below this).
		MaxRecordHeaders: 1 << 20,
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return nil, err
	}
	var msgs []kafkago.Message
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return msgs, err
		}
		if m.Offset >= to {
			return msgs, nil
		}
		msgs = append(msgs, m)
		if m.Offset == to-1 {
			return msgs, nil
		}
	}
}

// EndOffsets returns the end offset (high-water mark: the offset the next
// record will get) of every partition of topic.
func EndOffsets(t testing.TB, brokers []string, topic string) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	ends, err := endOffsets(ctx, brokers, topic)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return ends
}

// CommittedOffsets returns the offsets group has committed for topic, by
// partition; partitions without a committed offset are left out.
func CommittedOffsets(t testing.TB, brokers []string, group, topic string) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	committed, err := committedOffsets(ctx, brokers, group, topic)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return committed
}

// WaitCommitted waits until group has committed the end offset of every
// non-empty partition of topic, and returns the committed offsets. It fails
// the test, showing both sides, if that does not happen within timeout.
func WaitCommitted(t testing.TB, brokers []string, group, topic string, timeout time.Duration) map[int]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var ends, committed map[int]int64
	var last error
	ok := poll(ctx, func() bool {
		if ends, last = endOffsets(ctx, brokers, topic); last != nil {
			return false
		}
		if committed, last = committedOffsets(ctx, brokers, group, topic); last != nil {
			return false
		}
		for p, end := range ends {
			if c, ok := committed[p]; (ok || end > 0) && c != end {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("kafkatest: group %s did not commit the end of %s within %v: committed %v, end %v (last error: %v)",
			group, topic, timeout, committed, ends, last)
	}
	return committed
}

func endOffsets(ctx context.Context, brokers []string, topic string) (map[int]int64, error) {
	_, end, err := offsetRange(ctx, brokers, topic)
	return end, err
}

// offsetRange returns the first and the end offset of every partition of topic.
func offsetRange(ctx context.Context, brokers []string, topic string) (first, end map[int]int64, err error) {
	parts, err := partitionsOf(ctx, brokers, topic)
	if err != nil {
		return nil, nil, err
	}
	client, done := newClient(brokers)
	defer done()
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for _, p := range parts {
		req.Topics[topic] = append(req.Topics[topic], kafkago.FirstOffsetOf(p), kafkago.LastOffsetOf(p))
	}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	first, end = make(map[int]int64, len(parts)), make(map[int]int64, len(parts))
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, nil, fmt.Errorf("list offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		first[po.Partition], end[po.Partition] = po.FirstOffset, po.LastOffset
	}
	if len(end) != len(parts) {
		return nil, nil, fmt.Errorf("list offsets of %s: got partitions %v, want %v", topic, slices.Sorted(maps.Keys(end)), parts)
	}
	return first, end, nil
}

func committedOffsets(ctx context.Context, brokers []string, group, topic string) (map[int]int64, error) {
	parts, err := partitionsOf(ctx, brokers, topic)
	if err != nil {
		return nil, err
	}
	client, done := newClient(brokers)
	defer done()
	res, err := client.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	if errors.Is(res.Error, kafkago.GroupIdNotFound) {
		return map[int]int64{}, nil // kfake's answer for a group that never committed
	}
	if res.Error != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, res.Error)
	}
	committed := make(map[int]int64)
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("fetch offsets of group %s on %s/%d: %w", group, topic, p.Partition, p.Error)
		}
		if p.CommittedOffset >= 0 {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	return committed, nil
}

// partitionsOf returns the sorted partition ids of topic once each has a
// leader. It asks through a new transport each time: a transport answers
// metadata requests from its cache, which would hide a topic created since.
// leadersServe asks each partition's leader for the partition's first
// offset: a broker listed as leader in the metadata may not act as one yet
// and answers NOT_LEADER_FOR_PARTITION, to a produce as to this question,
// which changes nothing.
func leadersServe(ctx context.Context, client *kafkago.Client, topic string, parts []int) error {
	offs := make([]kafkago.OffsetRequest, len(parts))
	for i, p := range parts {
		offs[i] = kafkago.FirstOffsetOf(p)
	}
	res, err := client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: offs}})
	if err != nil {
		return fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	served := 0
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("list offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		served++
	}
	if served != len(parts) {
		return fmt.Errorf("list offsets of %s: %d of %d partitions answered", topic, served, len(parts))
	}
	return nil
}

func partitionsOf(ctx context.Context, brokers []string, topic string) ([]int, error) {
	client, done := newClient(brokers)
	defer done()
	res, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	for _, tm := range res.Topics {
		if tm.Name != topic {
			continue
		}
		if tm.Error != nil {
			return nil, fmt.Errorf("metadata of %s: %w", topic, tm.Error)
		}
		parts := make([]int, 0, len(tm.Partitions))
		for _, p := range tm.Partitions {
			if p.Error != nil {
				return nil, fmt.Errorf("metadata of %s/%d: %w", topic, p.ID, p.Error)
			}
			if p.Leader.Host == "" {
				return nil, fmt.Errorf("%s/%d has no leader yet", topic, p.ID)
			}
			parts = append(parts, p.ID)
		}
		if len(parts) == 0 {
			return nil, fmt.Errorf("topic %s has no partitions yet", topic)
		}
		slices.Sort(parts)
		return parts, nil
	}
	return nil, fmt.Errorf("topic %s: %w", topic, kafkago.UnknownTopicOrPartition)
}

func newClient(brokers []string) (*kafkago.Client, func()) {
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	return &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: opTimeout}, tr.CloseIdleConnections
}

// poll calls cond every 50 ms until it reports true or ctx ends, and
// reports whether cond did.
func poll(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// EvictMembers removes every member of every consumer group on the brokers
// whose ID starts with prefix (a service's group and its retry tiers'
// groups, prefix.retry.N), as the group coordinator does when a member's
// session times out. A test that SIGKILLs a consumer calls it before
// starting the next one, so that the next one's join does not wait out the
// dead members' session timeout (30 s in the service) for its group to
// rebalance. The dead process committed what it committed and nothing more:
// what the next consumer resumes from is the same either way. Only for
// groups whose consumers are all gone: a live member evicted this way has
// to join again. Groups of other tests on a shared broker are left alone.
func EvictMembers(t testing.TB, brokers []string, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	client, done := newClient(brokers)
	defer done()
	groups, err := client.ListGroups(ctx, &kafkago.ListGroupsRequest{})
	if err == nil {
		err = groups.Error
	}
	if err != nil {
		t.Fatalf("kafkatest: list groups: %v", err)
	}
	for _, g := range groups.Groups {
		if !strings.HasPrefix(g.GroupID, prefix) {
			continue
		}
		desc, err := client.DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: []string{g.GroupID}})
		if err != nil {
			t.Fatalf("kafkatest: describe group %s: %v", g.GroupID, err)
		}
		var members []kafkago.LeaveGroupRequestMember
		for _, dg := range desc.Groups {
			if dg.Error != nil {
				t.Fatalf("kafkatest: describe group %s: %v", g.GroupID, dg.Error)
			}
			for _, m := range dg.Members {
				members = append(members, kafkago.LeaveGroupRequestMember{ID: m.MemberID})
			}
		}
		if len(members) == 0 {
			continue
		}
		res, err := client.LeaveGroup(ctx, &kafkago.LeaveGroupRequest{GroupID: g.GroupID, Members: members})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			t.Fatalf("kafkatest: evict the members of group %s: %v", g.GroupID, err)
		}
		for _, m := range res.Members {
			if m.Error != nil && !errors.Is(m.Error, kafkago.UnknownMemberId) {
				t.Fatalf("kafkatest: evict member %s of group %s: %v", m.ID, g.GroupID, m.Error)
			}
		}
	}
}

// MessageWriter is a writer of [NewWriter] that writes infra/kafka's
// messages, as the service's own writer does: for tests that route records
// through a kafka-go writer they tune (adapters/in/kafka.MessageWriter,
// adapters/out/kafka.Writer). Its own WriteMessages hides kafka-go's.
type MessageWriter struct{ *kafkago.Writer }

// NewMessageWriter returns [NewWriter]'s writer as a MessageWriter.
func NewMessageWriter(t testing.TB, brokers []string, topic string) MessageWriter {
	t.Helper()
	return MessageWriter{NewWriter(t, brokers, topic)}
}

// WriteMessages writes msgs as kafka-go messages, in one call.
func (w MessageWriter) WriteMessages(ctx context.Context, msgs ...kafkaclient.Message) error {
	out := make([]kafkago.Message, len(msgs))
	for i, m := range msgs {
		out[i] = kafkago.Message{Topic: m.Topic, Key: m.Key, Value: m.Value, Time: m.Time}
		for _, h := range m.Headers {
			out[i].Headers = append(out[i].Headers, kafkago.Header{Key: h.Key, Value: h.Value})
		}
	}
	return w.Writer.WriteMessages(ctx, out...)
}
