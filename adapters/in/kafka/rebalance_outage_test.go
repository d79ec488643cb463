package kafka

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// depHandler meets an outage of dep while down is set, and charges
// otherwise.
type depHandler struct {
	chargeAll
	dep  order.Dependency
	down *atomic.Bool
	// together are records whose first tries wait for each other (and
	// hold back every other record's first try), so that the outage finds
	// them all in flight; all is closed when they are.
	together []string
	all      chan struct{}
	allIn    bool
	// tries counts the attempts per record value.
	mu    sync.Mutex
	tries map[string]int
}

func (h *depHandler) Handle(ctx context.Context, msg Record) (order.Outcome, error) {
	v := string(msg.Value)
	h.mu.Lock()
	if h.tries == nil {
		h.tries = map[string]int{}
	}
	h.tries[v]++
	// Until all of together have arrived, first tries wait for them.
	if h.all == nil {
		h.all = make(chan struct{})
	}
	wait := h.tries[v] == 1 && len(h.together) > 0 && !h.allIn
	if wait && !slices.ContainsFunc(h.together, func(w string) bool { return h.tries[w] == 0 }) {
		h.allIn, wait = true, false
		close(h.all)
	}
	all := h.all
	h.mu.Unlock()
	if wait {
		select {
		case <-all:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if h.down.Load() {
		return "", &order.OutageError{Dependency: h.dep, Err: errors.New("injected outage")}
	}
	return h.chargeAll.Handle(ctx, msg)
}

func (h *depHandler) tried(v string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tries[v] > 0
}

// outageMember is one member of a group in an outage test: its consumer,
// its own pause (probing dep with probe, when not nil, as the service
// does) and the gauge the pause reports to.
type outageMember struct {
	name  string
	h     *depHandler
	pause *health.Pause
	gauge prometheus.Gauge
	// gaveWay is closed when the member logs that a held event was
	// interrupted by a rebalance or shutdown; assigned when it logs that a
	// generation assigned it partitions.
	gaveWay, assigned chan struct{}
	stop              func()
}

func (m *outageMember) paused() bool { p, _ := m.pause.Paused(); return p }

// startOutageMember starts a consumer of topic in group named for
// preferBalancer.
func startOutageMember(t *testing.T, brokers []string, group, topic, name string, h *depHandler, probe health.Probe) *outageMember {
	t.Helper()
	om := &outageMember{name: name, h: h, gaveWay: make(chan struct{}), assigned: make(chan struct{})}
	var logs syncbuf.Buffer
	log := slog.New(multiSignal{[]signalHandler{
		{"event interrupted by shutdown or a rebalance during an outage", &sync.Once{}, om.gaveWay},
		{"partitions assigned", &sync.Once{}, om.assigned},
	}, slog.NewTextHandler(&logs, nil)})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("member %s logs:\n%s", name, logs.String())
		}
	})
	m := metrics.New(prometheus.NewRegistry(), false)
	om.gauge = m.ConsumerPaused
	om.pause = health.NewPause(&metrics.Outage{Paused: m.ConsumerPaused}, log)
	om.pause.Started()
	routes := Routes{Group: group, RetryTopics: []string{topic + ".retry.1"}, DLQTopic: topic + ".dlq", Policy: fastPolicy(time.Second)}
	cfg := kafkatest.FastReaderConfig(brokers, group, topic)
	cfg.GroupBalancers = []kafkago.GroupBalancer{preferBalancer{name}}
	src := newTestSource(t, cfg)
	c := NewConsumer(src, h, NewRouter(NewClientWriter(kafkatest.NewMessageWriter(t, brokers, "")), routes, m.Router(), om.pause, log), om.pause, m.Consumer(), log,
		Options{MaxInFlight: 4, CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second,
			RevokeTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = c.Run(ctx) })
	if probe != nil {
		om.pause.SetProbe(h.dep, probe)
		wg.Go(func() {
			om.pause.Run(ctx, health.ProbeOptions{Every: 50 * time.Millisecond, WhilePaused: 20 * time.Millisecond})
		})
	}
	var once sync.Once
	om.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if runErr != nil {
				t.Errorf("Run %s: %v", name, runErr)
			}
			_ = src.Close()
		})
	}
	t.Cleanup(om.stop)
	return om
}

// multiSignal is a slog handler closing each signal's channel at the first
// record whose message starts with its prefix, and keeping every record in
// log.
type multiSignal struct {
	signals []signalHandler
	log     slog.Handler
}

func (m multiSignal) Enabled(context.Context, slog.Level) bool { return true }
func (m multiSignal) Handle(ctx context.Context, r slog.Record) error {
	for _, s := range m.signals {
		_ = s.Handle(ctx, r)
	}
	return m.log.Handle(ctx, r)
}
func (m multiSignal) WithAttrs(as []slog.Attr) slog.Handler {
	return multiSignal{m.signals, m.log.WithAttrs(as)}
}
func (m multiSignal) WithGroup(string) slog.Handler { return m }

func waitSignal(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// rebalanceOutageCase: during an outage of dep, a
// rebalance (a member joining, or one leaving) takes the events a member
// held for it away with the old generation. When dep answers again, every
// member must resume and bill everything, whoever held the events that met
// the outage. probe is dep's probe (nil: none, as for the gateway).
func rebalanceOutageCase(t *testing.T, brokers []string, topic, group string, dep order.Dependency, probe health.Probe, joining bool) {
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
	var down atomic.Bool
	down.Store(true)
	hA := &depHandler{dep: dep, down: &down}
	hB := &depHandler{dep: dep, down: &down}
	var a, b *outageMember
	if joining {
		// A alone holds events of both partitions; B joins and takes p0.
		hA.together = []string{"p0-1", "p1-1"}
		send("p0-1", "p0-2", "p1-1", "p1-2")
		a = startOutageMember(t, brokers, group, topic, "a", hA, probe)
		poll.Until(t, "A to hold events of both partitions", 30*time.Second, func() bool {
			return a.paused() && hA.tried("p0-1") && hA.tried("p1-1")
		})
		b = startOutageMember(t, brokers, group, topic, "b", hB, probe)
		waitSignal(t, "A's held events to give way to the rebalance", a.gaveWay)
		poll.Until(t, "B to hold p0's first event", 30*time.Second, func() bool { return b.paused() && hB.tried("p0-1") })
	} else {
		// A holds p1's events and B p0's; B leaves and A takes both.
		a = startOutageMember(t, brokers, group, topic, "a", hA, probe)
		waitSignal(t, "A's first assignment", a.assigned)
		b = startOutageMember(t, brokers, group, topic, "b", hB, probe)
		waitSignal(t, "B's first assignment", b.assigned)
		send("p0-1", "p0-2", "p1-1", "p1-2")
		poll.Until(t, "A to hold p1's and B p0's first event", 30*time.Second, func() bool {
			return a.paused() && b.paused() && hA.tried("p1-1") && hB.tried("p0-1")
		})
		b.stop()
		waitSignal(t, "A's held event to give way to the rebalance", a.gaveWay)
	}

	back := time.Now()
	down.Store(false)
	var resumed []string
	for _, m := range []*outageMember{a, b} {
		if !joining && m == b {
			continue
		}
		poll.Until(t, m.name+" to resume after the outage", 20*time.Second, func() bool {
			return !m.paused() && testutil.ToFloat64(m.gauge) == 0
		})
		resumed = append(resumed, m.name+" "+time.Since(back).Round(time.Millisecond).String())
	}
	t.Logf("%s outage, member %s: resumed after the dependency came back: %v", dep, map[bool]string{true: "joining", false: "leaving"}[joining], resumed)

	send("p0-3", "p1-3")
	saw := func(v string) bool { return hA.saw(v) || hB.saw(v) }
	poll.Until(t, "every record billed", 30*time.Second, func() bool {
		for _, v := range []string{"p0-1", "p0-2", "p0-3", "p1-1", "p1-2", "p1-3"} {
			if !saw(v) {
				return false
			}
		}
		return true
	})
}

// alwaysUp is a probe of a dependency that answers every ping (Postgres
// with a full disk answers pings too).
func alwaysUp(context.Context) error { return nil }

func TestRebalanceDuringOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dep     order.Dependency
		probe   health.Probe
		joining bool
	}{
		{"gateway/joining", order.DependencyGateway, nil, true},
		{"gateway/leaving", order.DependencyGateway, nil, false},
		{"postgres/joining", order.DependencyPostgres, alwaysUp, true},
		{"postgres/leaving", order.DependencyPostgres, alwaysUp, false},
	} {
		t.Run("fake/"+tc.name, func(t *testing.T) {
			t.Parallel()
			rebalanceOutageCase(t, kafkatest.NewFake(t).Brokers(), "main", "g", tc.dep, tc.probe, tc.joining)
		})
		t.Run("real/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.SharedReal(t)
			rebalanceOutageCase(t, c.Brokers(), kafkatest.UniqueName(t, "rbo"), kafkatest.UniqueName(t, "g"), tc.dep, tc.probe, tc.joining)
		})
	}
}
