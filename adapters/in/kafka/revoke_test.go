package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// preferBalancer makes assignments a test can predict: the member whose
// name sorts last takes partition 0, the others share the rest (a member
// alone takes everything). Every member of a group uses one with its own
// name; the leader's decides.
type preferBalancer struct{ name string }

func (b preferBalancer) ProtocolName() string      { return "prefer-test" }
func (b preferBalancer) UserData() ([]byte, error) { return []byte(b.name), nil }

func (b preferBalancer) AssignGroups(members []kafkago.GroupMember, parts []kafkago.Partition) kafkago.GroupMemberAssignments {
	out := kafkago.GroupMemberAssignments{}
	last := 0
	for i, m := range members {
		out[m.ID] = map[string][]int{}
		if bytes.Compare(m.UserData, members[last].UserData) > 0 {
			last = i
		}
	}
	var others []string
	for i, m := range members {
		if i != last {
			others = append(others, m.ID)
		}
	}
	n := 0
	for _, p := range parts {
		owner := members[last].ID
		if p.ID != 0 && len(others) > 0 {
			owner = others[n%len(others)]
			n++
		}
		out[owner][p.Topic] = append(out[owner][p.Topic], p.ID)
	}
	return out
}

// byKeyPrefix writes keys starting "p<N>-" to partition N.
var byKeyPrefix = kafkago.BalancerFunc(func(msg kafkago.Message, parts ...int) int {
	k := string(msg.Key)
	if i := strings.IndexByte(k, '-'); i > 1 && k[0] == 'p' {
		if n, err := strconv.Atoi(k[1:i]); err == nil {
			return n
		}
	}
	return parts[len(parts)-1]
})

// committedWatch polls a group's committed offsets and remembers any
// partition whose committed offset went down.
type committedWatch struct {
	mu        sync.Mutex
	last      map[int]int64
	backwards []string
	stop      chan struct{}
	done      chan struct{}
}

func watchCommitted(t *testing.T, brokers []string, group, topic string) *committedWatch {
	t.Helper()
	w := &committedWatch{last: map[int]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	tr := &kafkago.Transport{}
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: 5 * time.Second}
	go func() {
		defer close(w.done)
		defer tr.CloseIdleConnections()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := cl.OffsetFetch(ctx, &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1}}})
			cancel()
			if err != nil || res.Error != nil {
				continue
			}
			w.mu.Lock()
			for _, p := range res.Topics[topic] {
				if p.Error != nil || p.CommittedOffset < 0 {
					continue
				}
				if prev, ok := w.last[p.Partition]; ok && p.CommittedOffset < prev {
					w.backwards = append(w.backwards, "partition "+strconv.Itoa(p.Partition)+": "+
						strconv.FormatInt(prev, 10)+" → "+strconv.FormatInt(p.CommittedOffset, 10))
				}
				w.last[p.Partition] = p.CommittedOffset
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.close)
	return w
}

func (w *committedWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *committedWatch) moves() []string {
	w.close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.backwards...)
}

// member starts one consumer of topic in group, named for preferBalancer;
// the returned function stops it and waits for Run to return.
func member(t *testing.T, brokers []string, group, topic, name string, h MessageHandler) func() {
	t.Helper()
	return memberWith(t, brokers, group, topic, name, h, slog.New(slog.DiscardHandler), 100*time.Millisecond)
}

// memberWith is member with its own logger and revoke grace.
func memberWith(t *testing.T, brokers []string, group, topic, name string, h MessageHandler, log *slog.Logger, grace time.Duration) func() {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry(), false)
	pause := health.NewPause(&metrics.Outage{Paused: m.ConsumerPaused}, log)
	routes := Routes{Group: group, RetryTopics: []string{topic + ".retry.1"}, DLQTopic: topic + ".dlq", Policy: order.NewRetryPolicy(time.Second)}
	cfg := kafkatest.FastReaderConfig(brokers, group, topic)
	cfg.GroupBalancers = []kafkago.GroupBalancer{preferBalancer{name}}
	src := newTestSource(t, cfg)
	c := NewConsumer(src, h, NewRouter(NewClientWriter(kafkatest.NewMessageWriter(t, brokers, "")), routes, m.Router(), pause, log), pause, m.Consumer(), log,
		Options{MaxInFlight: 4, CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second,
			RevokeTimeout: grace})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run %s: %v", name, err)
			}
			_ = src.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// holdingHandler blocks on the record "p0-hold" until released; every
// other record is charged at once.
type holdingHandler struct {
	chargeAll
	started  chan struct{}
	release  chan struct{}
	finished atomic.Bool
	once     sync.Once
}

func (h *holdingHandler) Handle(ctx context.Context, msg Record) (order.Outcome, error) {
	h.seen.Store(string(msg.Value), true)
	if string(msg.Value) == "p0-hold" {
		h.once.Do(func() { close(h.started) })
		<-h.release
		h.finished.Store(true)
	}
	return order.OutcomeCharged, nil
}

// chargeAll charges every record and remembers which it saw.
type chargeAll struct{ seen sync.Map }

func (h *chargeAll) Handle(_ context.Context, msg Record) (order.Outcome, error) {
	h.seen.Store(string(msg.Value), true)
	return order.OutcomeCharged, nil
}

func (h *chargeAll) saw(v string) bool { _, ok := h.seen.Load(v); return ok }

// revokeCase: partition 0 moves from consumer A
// to B while A holds one of its events; B handles the partition and commits
// further; then A's event finishes. A must not commit partition 0 (its
// commit would move the group's offset back), the group's committed offset
// never decreases, and when partition 0 comes back to A, A starts from the
// committed offset.
func revokeCase(t *testing.T, brokers []string, topic, group string) {
	kafkatest.CreateTopics(t, brokers, 2, topic)
	w := kafkatest.NewWriter(t, brokers, topic)
	w.Balancer = byKeyPrefix
	send := func(keys ...string) {
		t.Helper()
		var msgs []kafkago.Message
		for _, k := range keys {
			msgs = append(msgs, kafkago.Message{Key: []byte(k), Value: []byte(k)})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			t.Fatal(err)
		}
	}
	watch := watchCommitted(t, brokers, group, topic)

	send("p0-hold", "p1-a")
	hA := &holdingHandler{started: make(chan struct{}), release: make(chan struct{})}
	stopA := member(t, brokers, group, topic, "a", hA)
	select {
	case <-hA.started:
	case <-time.After(30 * time.Second):
		t.Fatal("A never started p0-hold")
	}

	// B joins and takes partition 0, handles it from its committed offset
	// (none: the start) and commits past A's event.
	hB := &chargeAll{}
	stopB := member(t, brokers, group, topic, "b", hB)
	poll.Until(t, "B to take partition 0", 30*time.Second, func() bool { return hB.saw("p0-hold") })
	send("p0-1", "p0-2", "p0-3", "p0-4", "p0-5", "p1-b")
	end := kafkatest.EndOffsets(t, brokers, topic)
	poll.Until(t, "B to commit the end of partition 0", 30*time.Second, func() bool {
		return kafkatest.CommittedOffsets(t, brokers, group, topic)[0] == end[0]
	})

	// A's event finishes long after the move: A must commit nothing for
	// partition 0.
	close(hA.release)
	poll.Until(t, "A's held event to finish", 10*time.Second, hA.finished.Load)

	// B leaves: partition 0 comes back to A, which starts afresh from B's
	// committed offset, not from what it held before.
	stopB()
	send("p0-6")
	poll.Until(t, "A to take partition 0 back", 30*time.Second, func() bool { return hA.saw("p0-6") })
	stopA()

	end = kafkatest.EndOffsets(t, brokers, topic)
	if got := kafkatest.CommittedOffsets(t, brokers, group, topic); got[0] != end[0] {
		t.Errorf("partition 0 committed %d, want its end %d", got[0], end[0])
	}
	for _, v := range []string{"p0-1", "p0-5"} {
		if hA.saw(v) {
			t.Errorf("A handled %s, which B had committed, after partition 0 came back", v)
		}
	}
	if moves := watch.moves(); len(moves) > 0 {
		t.Errorf("committed offsets moved backwards: %v", moves)
	}
}

func TestRevokedPartitionIsNotCommittedFake(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	revokeCase(t, c.Brokers(), "main", "g")
}

func TestRevokedPartitionIsNotCommittedReal(t *testing.T) {
	t.Parallel()
	c := kafkatest.SharedReal(t)
	revokeCase(t, c.Brokers(), kafkatest.UniqueName(t, "revoke"), kafkatest.UniqueName(t, "g"))
}

// newTestSource joins cfg's group; the source is closed by the caller.
func newTestSource(t testing.TB, cfg kafkago.ReaderConfig) *GroupSource {
	t.Helper()
	src, err := NewGroupSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// signalHandler is a slog handler that closes ch at the first record whose
// message starts with prefix.
type signalHandler struct {
	prefix string
	once   *sync.Once
	ch     chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// An event that finishes within the revoke grace is committed through the
// generation that is ending, so the partition's next owner does not handle
// it again (as the Java client's onPartitionsRevoked allows).
func revokeGraceCase(t *testing.T, brokers []string, topic, group string) {
	kafkatest.CreateTopics(t, brokers, 2, topic)
	w := kafkatest.NewWriter(t, brokers, topic)
	w.Balancer = byKeyPrefix
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("p0-hold"), Value: []byte("p0-hold")}); err != nil {
		t.Fatal(err)
	}
	revoking := make(chan struct{})
	hA := &holdingHandler{started: make(chan struct{}), release: make(chan struct{})}
	stopA := memberWith(t, brokers, group, topic, "a", hA, slog.New(signalHandler{"generation ended", &sync.Once{}, revoking}), 10*time.Second)
	<-hA.started

	hB := &chargeAll{}
	stopB := member(t, brokers, group, topic, "b", hB)
	select {
	case <-revoking:
	case <-time.After(30 * time.Second):
		t.Fatal("A's generation never ended")
	}
	close(hA.release) // within A's grace
	poll.Until(t, "partition 0 committed past the held event", 30*time.Second, func() bool {
		return kafkatest.CommittedOffsets(t, brokers, group, topic)[0] == 1
	})
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("p0-next"), Value: []byte("p0-next")}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "B to handle partition 0", 30*time.Second, func() bool { return hB.saw("p0-next") })
	if hB.saw("p0-hold") {
		t.Error("B handled p0-hold, which A finished and should have committed within its grace")
	}
	stopB()
	stopA()
}

func TestRevokeGraceCommitsWhatFinishedFake(t *testing.T) {
	t.Parallel()
	revokeGraceCase(t, kafkatest.NewFake(t).Brokers(), "main", "g")
}

func TestRevokeGraceCommitsWhatFinishedReal(t *testing.T) {
	t.Parallel()
	revokeGraceCase(t, kafkatest.SharedReal(t).Brokers(), kafkatest.UniqueName(t, "grace"), kafkatest.UniqueName(t, "g"))
}
