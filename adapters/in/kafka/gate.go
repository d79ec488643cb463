package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	kafkaclient "github.com/acme/billing/infra/kafka"
)

// GroupMember is one member of a consumer group as DescribeGroups shows
// it.
type GroupMember struct {
	Group    string
	ID       string
	ClientID string
	Host     string
	// UserData is the user data of the member's metadata in the group's
	// protocol: its Announcement, for billing 1.2.0 and later.
	UserData []byte
}

// GroupState is one consumer group as DescribeGroups shows it. Kafka shows
// the members' metadata only while the group is Stable; while it
// rebalances (PreparingRebalance, CompletingRebalance) it lists the
// members without it.
type GroupState struct {
	Group   string
	State   string // Empty, Stable, PreparingRebalance, CompletingRebalance, Dead
	Members []GroupMember
}

// DescribeGroups describes consumer groups (Kafka's DescribeGroups): the
// port of the release gate, DescribeWith in production.
type DescribeGroups func(ctx context.Context, groups []string) ([]GroupState, error)

// DescribeWith returns the DescribeGroups of describe (infra/kafka's
// Cluster.GroupDescriber): each member's user data is what it announced in
// the group's protocol.
func DescribeWith(describe func(ctx context.Context, groups []string) ([]kafkaclient.GroupDescription, error)) DescribeGroups {
	return func(ctx context.Context, groups []string) ([]GroupState, error) {
		ds, err := describe(ctx, groups)
		if err != nil {
			return nil, err
		}
		out := make([]GroupState, 0, len(ds))
		for _, d := range ds {
			st := GroupState{Group: d.Group, State: d.State}
			for _, m := range d.Members {
				st.Members = append(st.Members, GroupMember{Group: d.Group, ID: m.ID, ClientID: m.ClientID,
					Host: m.Host, UserData: m.UserData})
			}
			out = append(out, st)
		}
		return out, nil
	}
}

// GateOptions configures a ReleaseGate.
type GateOptions struct {
	// Groups are the groups the process consumes with: the main group and
	// every tier's. A member of any of them that this release is not safe
	// beside holds consumption in all of them.
	Groups []string
	// RunsBeside is the oldest release this one is safe beside
	// (internal/version.RunsBeside).
	RunsBeside string
	// Quiet is how long no such member must have been seen before
	// consumption resumes: an attempt's life (order.AttemptTerms.Life),
	// since a release that records no attempt may still have one at the
	// gateway when its member leaves.
	Quiet time.Duration
	// Every is the interval of the checks while the process runs (default
	// 3s).
	Every time.Duration
	// Timeout bounds one check (default 5s).
	Timeout time.Duration
}

// ReleaseGate keeps this release from consuming beside a release it is not
// safe beside (docs/interface.md §10; docs/design.md, "Releases side by side"):
// before the process joins its groups, and every few seconds while it
// runs, it describes them (one DescribeGroups request). While any member
// announces nothing, or a release older than RunsBeside (NotSafeBeside),
// it holds consumption (Hold, by "release"): the process does not join, or
// leaves, so the other release keeps every partition, and no path of it
// sends a key; it stays ready. It logs once whom it waits for. Once no
// such member has been seen for Quiet, counted from the first check that
// found none with no check since that could not tell, consumption resumes.
type ReleaseGate struct {
	describe DescribeGroups
	hold     *Hold
	opts     GateOptions
	log      *slog.Logger

	mu         sync.Mutex
	waiting    []GroupMember // the members the last check that could tell found unsafe
	clearSince time.Time     // when a check first found none of them, after one that did or one that could not tell
	logged     string        // the members last logged as waited for
	failing    bool          // the last check failed (logged once per streak)
}

// NewReleaseGate returns a gate that holds hold while it must, and makes
// hold's Verify run its Check.
func NewReleaseGate(describe DescribeGroups, hold *Hold, opts GateOptions, log *slog.Logger) *ReleaseGate {
	if opts.Every <= 0 {
		opts.Every = 3 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	g := &ReleaseGate{describe: describe, hold: hold, opts: opts, log: log}
	hold.AddCheck(g.Check)
	return g
}

// Check describes the groups once and holds or releases consumption by
// what it shows. It reports whether it could tell: not when a group with
// members is rebalancing and no member seen elsewhere settles it (Kafka
// shows no metadata then), nor when the request fails (the error); the
// hold is then left as it was.
func (g *ReleaseGate) Check(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	defer cancel()
	groups, err := g.describe(ctx, g.opts.Groups)
	if err != nil {
		g.mu.Lock()
		first := !g.failing
		g.failing = true
		g.mu.Unlock()
		if first {
			g.log.Warn("release gate: describing the consumer groups failed; the gate stays as it was",
				slog.String("error", err.Error()))
		}
		g.blind()
		return false, err
	}
	var unsafe []GroupMember
	told := true
	for _, gs := range groups {
		switch gs.State {
		case "Stable":
			for _, m := range gs.Members {
				if NotSafeBeside(g.opts.RunsBeside, m.UserData) {
					unsafe = append(unsafe, m)
				}
			}
		case "Empty", "Dead":
		default:
			if len(gs.Members) > 0 {
				told = false
			}
		}
	}
	if len(unsafe) == 0 && !told {
		g.blind()
		return false, nil
	}
	g.update(unsafe, time.Now())
	return true, nil
}

// blind records a check that could not tell. It leaves the hold as it was;
// but while the gate counts the quiet period, the period starts again at the
// next check that can tell, since this one may have missed a member come
// back (a process of the older release rejoining, its metadata not shown
// while the group rebalances): the period counts only time the gate saw the
// groups without them.
func (g *ReleaseGate) blind() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.clearSince = time.Time{}
}

// update applies what a check that could tell found at now.
func (g *ReleaseGate) update(unsafe []GroupMember, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failing {
		g.failing = false
		g.log.Info("release gate: describing the consumer groups works again")
	}
	if len(unsafe) > 0 {
		g.waiting, g.clearSince = unsafe, time.Time{}
		if key := memberKeys(unsafe); key != g.logged {
			g.logged = key
			g.log.Warn("release gate: members of a release this one is not safe beside are in the consumer groups; this process does not consume, and sends no key, until they have left",
				slog.Int("members", len(unsafe)), slog.Any("waiting_for", memberLogs(unsafe)),
				slog.String("runs_beside", g.opts.RunsBeside))
		}
		g.hold.Set(HoldRelease, fmt.Sprintf("%d members of a release before %s in the groups (%s)",
			len(unsafe), g.opts.RunsBeside, memberLogs(unsafe)[0]))
		return
	}
	if g.waiting == nil {
		g.hold.Clear(HoldRelease)
		return
	}
	if g.clearSince.IsZero() {
		g.clearSince = now
	}
	if g.logged != "" { // once per departure, however many blind checks restart the period
		g.logged = ""
		g.log.Info("release gate: the members this process waited for have left; it consumes again once their attempts can have ended",
			slog.Duration("after", g.opts.Quiet))
	}
	if left := g.opts.Quiet - now.Sub(g.clearSince); left > 0 {
		g.hold.Set(HoldRelease, fmt.Sprintf("the members of a release before %s left at %s: waiting %s for their attempts to end",
			g.opts.RunsBeside, g.clearSince.UTC().Format(time.RFC3339), left.Round(time.Second)))
		return
	}
	g.waiting, g.clearSince = nil, time.Time{}
	g.hold.Clear(HoldRelease)
}

// Prime checks once, before anything of the process consumes or sends a
// key, and if that check could not tell, holds consumption until a later
// one does.
func (g *ReleaseGate) Prime(ctx context.Context) {
	if told, _ := g.Check(ctx); !told && ctx.Err() == nil {
		g.hold.Set(HoldRelease, "not known yet which releases the groups' members run")
	}
}

// Run checks every Every until ctx ends.
func (g *ReleaseGate) Run(ctx context.Context) {
	t := time.NewTicker(g.opts.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _ = g.Check(ctx) // a failure is logged by Check, and changes nothing
	}
}

// memberLog is how a log line names a member waited for.
type memberLog struct {
	Group     string `json:"group"`
	MemberID  string `json:"member_id"`
	ClientID  string `json:"client_id"`
	Host      string `json:"host"`
	Announced string `json:"announced"`
}

func (m memberLog) String() string {
	return "member " + m.MemberID + " of " + m.Group + " on " + m.Host + ", announcing " + m.Announced
}

func memberLogs(ms []GroupMember) []memberLog {
	out := make([]memberLog, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberLog{Group: m.Group, MemberID: m.ID, ClientID: m.ClientID, Host: m.Host,
			Announced: describeAnnouncement(m.UserData)})
	}
	return out
}

// memberKeys identifies a set of members, whatever their order.
func memberKeys(ms []GroupMember) string {
	keys := make([]string, 0, len(ms))
	for _, m := range ms {
		keys = append(keys, m.Group+"/"+m.ID)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}
