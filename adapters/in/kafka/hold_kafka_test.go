package kafka

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/version"
)

// thisRelease is what this build announces.
var thisRelease = Announcement{Release: version.Release, RunsBeside: version.RunsBeside}

// describeGroup describes one group with kafka-go's own client (states,
// members and their assignments as the broker has them).
func describeGroup(t *testing.T, brokers []string, group string) kafkago.DescribeGroupsResponseGroup {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := client.DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(resp.Groups) != 1 {
		t.Logf("describe %s: %v", group, err)
		return kafkago.DescribeGroupsResponseGroup{}
	}
	return resp.Groups[0]
}

// While held, a consumer finishes what it has, commits, leaves its group
// (which is then empty: nothing of it fetches) and takes nothing new; once
// the hold opens it joins again, announcing its release, and consumes what
// arrived meanwhile.
func TestHeldConsumerLeavesAndRejoins(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(string, int) (order.Outcome, error) { return order.OutcomeCharged, nil }}
	hold, _ := newTestHold(t)
	src, err := NewGroupSource(kafkatest.FastReaderConfig(r.brokers, r.group, r.topic), WithAnnouncement(thisRelease))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	pause := health.NewPause(&metrics.Outage{Paused: r.m.ConsumerPaused}, log)
	c := NewConsumer(src, h, NewRouter(NewClientWriter(kafkatest.NewMessageWriter(t, r.brokers, "")), r.routes, r.m.Router(), pause, log), pause, r.m.Consumer(), log,
		Options{MaxInFlight: 4, CommitInterval: 20 * time.Millisecond, DrainTimeout: 2 * time.Second, RevokeTimeout: 500 * time.Millisecond, Hold: hold})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = src.Close()
	}()

	r.send(t, "a1", "a2", "a3")
	poll.Until(t, "the first records handled", 20*time.Second, func() bool {
		return h.count("a1") == 1 && h.count("a2") == 1 && h.count("a3") == 1
	})
	g := describeGroup(t, r.brokers, r.group)
	if len(g.Members) != 1 {
		t.Fatalf("group before the hold: %+v", g)
	}
	if a, ok := ParseAnnouncement(g.Members[0].MemberMetadata.UserData); !ok || a != thisRelease {
		t.Errorf("the member announces %+v (%v), want %+v", a, ok, thisRelease)
	}

	hold.Set(HoldOperator, "paused by a test")
	poll.Until(t, "the held consumer to leave its group", 20*time.Second, func() bool {
		g := describeGroup(t, r.brokers, r.group)
		return len(g.Members) == 0 && g.GroupState == "Empty"
	})
	if committed, end := kafkatest.CommittedOffsets(t, r.brokers, r.group, r.topic), kafkatest.EndOffsets(t, r.brokers, r.topic); !mapsEqual(committed, end) {
		t.Errorf("committed %v before leaving, want the end %v: in-flight events finish and are committed", committed, end)
	}
	r.send(t, "b1", "b2")
	// Verify runs before each join: a consumer that is not in its group
	// fetches nothing, so the records wait for the hold to open.
	if h.count("b1")+h.count("b2") != 0 {
		t.Fatal("a record was handled while consumption was held")
	}
	hold.Clear(HoldOperator)
	poll.Until(t, "the records sent while held, handled after the hold opened", 20*time.Second, func() bool {
		return h.count("b1") == 1 && h.count("b2") == 1
	})
	if h.count("a1") != 1 {
		t.Errorf("a record committed before the hold was handled again (%d times)", h.count("a1"))
	}
}

func mapsEqual(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A member that leads the group while a member announcing nothing (a
// release before 1.2.0: here a plain kafka-go reader) is in it assigns
// every partition to that member and none to itself; DescribeGroups shows
// both members' announcements, as the release gate reads them.
func announcementCase(t *testing.T, brokers []string, topic, group string) {
	kafkatest.CreateTopics(t, brokers, 3, topic)
	src, err := NewGroupSource(kafkatest.FastReaderConfig(brokers, group, topic), WithAnnouncement(thisRelease))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = src.Close() }()
	// This member joins first, so it leads the group; its generations are
	// taken and held, as a consumer would, until the test ends.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	gens := make(chan struct{})
	go func() {
		defer close(gens)
		for ctx.Err() == nil {
			gen, err := src.Next(ctx)
			if err != nil {
				t.Logf("next generation: %v", err)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			ended := make(chan struct{})
			gen.Start(func(genCtx context.Context) {
				defer close(ended)
				select {
				case <-genCtx.Done():
				case <-ctx.Done():
				}
			})
			<-ended
		}
	}()
	poll.Until(t, "the announcing member in the group", 30*time.Second, func() bool {
		g := describeGroup(t, brokers, group)
		return g.GroupState == "Stable" && len(g.Members) == 1
	})
	old := kafkago.NewReader(kafkatest.FastReaderConfig(brokers, group, topic))
	defer func() { _ = old.Close() }()

	var g kafkago.DescribeGroupsResponseGroup
	poll.Until(t, "both members in the stable group", 30*time.Second, func() bool {
		g = describeGroup(t, brokers, group)
		return g.GroupState == "Stable" && len(g.Members) == 2
	})
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	describe, closeDescribe := kc.GroupDescriber()
	defer closeDescribe()
	dctx, dcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer dcancel()
	states, err := DescribeWith(describe)(dctx, []string{group, group + ".absent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 || states[1].Group != group+".absent" || len(states[1].Members) != 0 {
		t.Errorf("a group nobody joined: %+v", states)
	}
	var announced, silent []GroupMember
	for _, m := range states[0].Members {
		if NotSafeBeside(version.RunsBeside, m.UserData) {
			silent = append(silent, m)
		} else {
			announced = append(announced, m)
		}
	}
	if states[0].State != "Stable" || len(announced) != 1 || len(silent) != 1 {
		t.Fatalf("DescribeWith: %+v; want one member announcing %s and one announcing nothing", states[0], version.Release)
	}
	for _, m := range g.Members {
		var parts []int
		for _, a := range m.MemberAssignments.Topics {
			parts = append(parts, a.Partitions...)
		}
		slices.Sort(parts)
		switch m.MemberID {
		case silent[0].ID:
			if !slices.Equal(parts, []int{0, 1, 2}) {
				t.Errorf("the member announcing nothing was assigned %v, want every partition", parts)
			}
		case announced[0].ID:
			if len(parts) != 0 {
				t.Errorf("the announcing leader assigned itself %v beside a release it is not safe beside, want nothing", parts)
			}
		}
	}
	cancel()
	<-gens
}

func TestAnnouncementFake(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	announcementCase(t, c.Brokers(), "main", "g")
}

// The same against Kafka 4.1.1 (kafkatest.SharedReal): the broker keeps
// and shows the user data as billing writes it.
func TestAnnouncementReal(t *testing.T) {
	t.Parallel()
	c := kafkatest.SharedReal(t)
	announcementCase(t, c.Brokers(), kafkatest.UniqueName(t, "announce"), kafkatest.UniqueName(t, "g"))
}
