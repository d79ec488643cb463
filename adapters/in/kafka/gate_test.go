package kafka

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// fakeGroups is a DescribeGroups whose answer the test sets.
type fakeGroups struct {
	mu     sync.Mutex
	groups []GroupState
	err    error
	calls  int
}

func (f *fakeGroups) set(err error, groups ...GroupState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups, f.err = groups, err
}

func (f *fakeGroups) describe(_ context.Context, _ []string) ([]GroupState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.groups, f.err
}

var (
	ours  = GroupMember{Group: "billing", ID: "billing-new-1", Host: "/10.0.0.1", UserData: Announcement{Release: "1.2.0", RunsBeside: "1.2.0"}.Encode()}
	older = GroupMember{Group: "billing", ID: "billing-old-1", Host: "/10.0.0.2"}
)

// advance lets fake time pass in a synctest bubble, then waits until every
// goroutine of the bubble is blocked again (the gate's check has run).
func advance(d time.Duration) {
	<-time.After(d) // fake time: the bubble's clock jumps, nothing sleeps
	synctest.Wait()
}

// The gate, every few seconds: a member announcing nothing holds
// consumption (logged once, however many checks see it); once it has left,
// consumption stays held for an attempt's life counted from the first check
// that no longer saw it, then resumes. A check that cannot tell (a group
// rebalancing shows no metadata) or fails changes nothing.
func TestReleaseGateWaitsAndRejoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncbuf.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		h, gauges := newTestHoldLogged(log)
		groups := &fakeGroups{}
		groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{ours}},
			GroupState{Group: "billing.retry.1", State: "Empty"})
		const quiet = 15 * time.Second
		g := NewReleaseGate(groups.describe, h, GateOptions{Groups: []string{"billing", "billing.retry.1"},
			RunsBeside: "1.2.0", Quiet: quiet, Every: 3 * time.Second}, log)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		g.Prime(ctx)
		if held, why := h.Held(); held {
			t.Fatalf("held with only this release in the groups: %s", why)
		}
		done := make(chan struct{})
		go func() { defer close(done); g.Run(ctx) }()

		// A previous release joins the main group.
		groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{ours, older}},
			GroupState{Group: "billing.retry.1", State: "Stable", Members: []GroupMember{{Group: "billing.retry.1", ID: "billing-old-1-tier", Host: "/10.0.0.2"}}})
		advance(3 * time.Second)
		held, why := h.Held()
		if !held || !strings.Contains(why, "billing-old-1") || testutil.ToFloat64(gauges.WithLabelValues("release")) != 1 {
			t.Fatalf("a member announcing nothing did not hold consumption: %v %q", held, why)
		}
		advance(9 * time.Second) // three more checks see it
		if n := strings.Count(logs.String(), "members of a release this one is not safe beside"); n != 1 {
			t.Errorf("whom it waits for logged %d times, want once:\n%s", n, logs.String())
		}
		for _, want := range []string{`"member_id":"billing-old-1"`, `"host":"/10.0.0.2"`, `"announced":"nothing (a release before 1.2.0)"`, `"member_id":"billing-old-1-tier"`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log of whom it waits for lacks %s:\n%s", want, logs.String())
			}
		}

		// While the group rebalances, Kafka shows no metadata: nothing
		// changes, in either direction.
		groups.set(nil, GroupState{Group: "billing", State: "PreparingRebalance", Members: []GroupMember{{Group: "billing", ID: "billing-new-1"}}})
		advance(3 * time.Second)
		if held, _ := h.Held(); !held {
			t.Fatal("a rebalancing group (no metadata) released the hold")
		}
		// A failing describe neither.
		groups.set(errors.New("coordinator not available"))
		advance(6 * time.Second)
		if held, _ := h.Held(); !held {
			t.Fatal("a failing describe released the hold")
		}

		// It leaves: consumption resumes an attempt's life after the first
		// check that no longer sees it, not before.
		groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{ours}}, GroupState{Group: "billing.retry.1", State: "Empty"})
		advance(3 * time.Second)
		left := time.Now()
		advance(quiet - 3*time.Second)
		if held, why := h.Held(); !held || !strings.Contains(why, "for their attempts to end") {
			t.Fatalf("%v after the member left: held %v (%q), want still held until %v have passed", time.Since(left), held, why, quiet)
		}
		// Back within the quiet period: the wait starts again.
		groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{ours, older}})
		advance(3 * time.Second)
		groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{ours}})
		advance(3 * time.Second)
		left = time.Now()
		advance(quiet - 3*time.Second)
		if held, _ := h.Held(); !held {
			t.Fatal("the quiet period did not start again when the member came back")
		}
		advance(3 * time.Second)
		if held, why := h.Held(); held || testutil.ToFloat64(gauges.WithLabelValues("release")) != 0 {
			t.Fatalf("%v after the member left for good: still held (%q)", time.Since(left), why)
		}
		if n := strings.Count(logs.String(), "describing the consumer groups failed"); n != 1 {
			t.Errorf("a failing describe logged %d times in a row, want once", n)
		}
		cancel()
		<-done
	})
}

// A first check that cannot tell holds consumption until one can: nothing
// is fetched, and no key sent, on a guess.
func TestReleaseGatePrimeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := newTestHold(t)
		groups := &fakeGroups{}
		groups.set(nil, GroupState{Group: "billing", State: "CompletingRebalance", Members: []GroupMember{{ID: "x"}}})
		g := NewReleaseGate(groups.describe, h, GateOptions{Groups: []string{"billing"}, RunsBeside: "1.2.0", Quiet: time.Minute}, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		g.Prime(ctx)
		if held, why := h.Held(); !held || !strings.Contains(why, "not known yet") {
			t.Fatalf("Prime on a rebalancing group: held %v, %q; want held until known", held, why)
		}
		// A consumer's Verify asks again until the group can tell.
		verified := make(chan bool)
		go func() { verified <- h.Verify(ctx) }()
		advance(time.Second)
		groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{ours}})
		if !<-verified {
			t.Fatal("Verify did not open once the group showed only this release")
		}
	})
}

// The quiet period counts time the gate saw the groups without the member.
// A check that cannot tell (the group rebalancing, its members' metadata
// not shown; or a failed describe) may hide the member come back, say a
// process of the older release rejoining after its session expired: the
// period starts again at the next check that can tell.
func TestReleaseGateQuietRestartsAfterChecksThatCannotTell(t *testing.T) {
	for _, blind := range []struct {
		name   string
		err    error
		groups []GroupState
	}{
		{name: "rebalancing", groups: []GroupState{{Group: "billing", State: "PreparingRebalance", Members: []GroupMember{{Group: "billing", ID: "billing-old-2"}}}}},
		{name: "describe failing", err: errors.New("coordinator not available")},
	} {
		t.Run(blind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, _ := newTestHold(t)
				groups := &fakeGroups{}
				groups.set(nil, GroupState{Group: "billing", State: "Stable", Members: []GroupMember{older}})
				const quiet = 15 * time.Second
				g := NewReleaseGate(groups.describe, h, GateOptions{Groups: []string{"billing"}, RunsBeside: "1.2.0",
					Quiet: quiet, Every: 3 * time.Second}, slog.New(slog.DiscardHandler))
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				g.Prime(ctx)
				done := make(chan struct{})
				go func() { defer close(done); g.Run(ctx) }()

				groups.set(nil, GroupState{Group: "billing", State: "Empty"}) // it leaves...
				advance(6 * time.Second)
				groups.set(blind.err, blind.groups...) // ...and the gate cannot tell for a while
				advance(9 * time.Second)
				groups.set(nil, GroupState{Group: "billing", State: "Empty"})
				advance(3 * time.Second)
				seen := time.Now() // the first check that can tell again
				advance(quiet - 3*time.Second)
				if held, why := h.Held(); !held {
					t.Fatalf("released %v after the first check that could tell again: the quiet period (%v) counted checks that could not (%q)",
						time.Since(seen), quiet, why)
				}
				advance(3 * time.Second)
				if held, why := h.Held(); held {
					t.Fatalf("%v after the member was last possibly there: still held (%q)", time.Since(seen), why)
				}
				cancel()
				<-done
			})
		})
	}
}

func newTestHoldLogged(log *slog.Logger) (*Hold, *prometheus.GaugeVec) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "paused"}, []string{"by"})
	return NewHold(&metrics.Hold{Paused: g}, log), g
}
