// Package health is the process's readiness switch: Pause, which knows
// whether a dependency (Postgres, Kafka, the payment gateway) is down,
// holds the events that met the outage, tells the consumers when to fetch
// again, probes the dependencies, and answers /readyz. The consumers
// (adapters/in/kafka) and the router act on it; internal/app builds it,
// starts its probes and serves its answer. It is not Kafka's: every
// dependency's outage pauses consumption alike.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

// Pause is the consumers' shared "a dependency is down" switch, and the one
// place that knows whether the process is ready (/readyz). An event that
// meets an outage marks its dependency down and is held: it keeps retrying
// itself; fetching waits while any dependency is down, so nothing new is
// taken, and nothing is routed to a retry tier or the DLQ because of the
// outage.
//
// A dependency comes back up on evidence about that same dependency, from
// the same kind of operation that failed: an event held for it that got an
// answer from it (see Holding.Answered). Evidence about another dependency
// does not end its outage, so that, say, duplicates answered by Postgres do
// not lift a pause for a gateway that refuses our credentials. A probe
// (Run) that answers while events are held for its dependency does not
// resume it by itself (Postgres answers a ping with a full disk): it makes
// the held events retry at once (Holding.HoldOff), and the first that goes
// through resumes consumption.
//
// An outage must still end when no event is held for it any more: the last
// one gave way to a rebalance or to shutdown (its partition may now be
// another member's), or it ended without touching the dependency (a
// duplicate). Nothing left would ever test the dependency, and a pause
// without a test lasts for ever. So, with no event held for it:
//
//   - an outage of a dependency without a probe (the gateway, whose only
//     safe request is a charge) lets the next record fetched through as its
//     probe event: that record is handled as if held for the outage from
//     the start, and its answer is the evidence. Until it has one, no other
//     record is let through for that outage;
//   - an outage of a dependency with a probe (Postgres, Kafka) ends with
//     the probe's next success. The probe is then the best evidence left:
//     a member whose partitions are idle has no event to test with. If the
//     fault is one a probe cannot see (a full disk), the next event meets
//     it again and consumption pauses again, routing nothing.
//
// An outage ended is not re-armed by the attempts that were in flight
// while it lasted: an attempt that meets an outage after one has ended
// since it began, its dependency up, tries again at once instead of
// pausing (Stale). For the gateway, whose client lets one probe call
// through after its cool-down and counts no result of a call begun before,
// that makes the probe the only judge of the resume.
//
// An outage that a probe or a start-up check found, which no event met, is
// of the second kind from the start. A routed write held back by Kafka (a
// broker away, or a destination that refuses even the record's stub) is
// held for Kafka's outage like an event, so a metadata ping that answers
// does not end it while the write still fails. A tier record is let
// through as a probe event only once it may be handled (x-not-before), so
// that it cannot hold the test back for a tier's delay.
type Pause struct {
	mu      sync.Mutex
	started bool
	down    map[order.Dependency]*outage
	since   time.Time     // when the current pause began
	resumed chan struct{} // closed when the current pause ends
	// wanted is closed (and replaced) when an outage without a probe is
	// left with no event held for it: fetchers waiting for the pause to end
	// fetch one record for it (Admit).
	wanted chan struct{}
	probes map[order.Dependency]Probe
	gauge  prometheus.Gauge
	log    *slog.Logger
	// resumes counts the outages that have ended. An event reads it before
	// each attempt: an outage the attempt meets after one ended, while its
	// dependency is up, is no evidence against that end (Stale).
	resumes atomic.Uint64
}

// outage is why one dependency is down.
type outage struct {
	dep     order.Dependency
	err     error
	since   time.Time
	held    int           // events held for it (including its probe event)
	probeOK bool          // the last probe of it succeeded
	retry   chan struct{} // closed (and replaced) to end the HoldOff of events held for it
	woke    uint64        // how many times retry was closed
}

// wake ends the HoldOff of the events held for o; p.mu is held.
func (o *outage) wake() {
	close(o.retry)
	o.retry = make(chan struct{})
	o.woke++
}

// Probe checks one dependency cheaply (a ping, a metadata request) within
// ctx's deadline.
type Probe func(ctx context.Context) error

// NewPause returns a switch reporting to m (billing_consumer_paused).
// It is not ready until Started is called.
func NewPause(m *metrics.Outage, log *slog.Logger) *Pause {
	m.Paused.Set(0)
	return &Pause{gauge: m.Paused, log: log, down: map[order.Dependency]*outage{}, probes: map[order.Dependency]Probe{},
		wanted: make(chan struct{})}
}

// SetProbe makes Run check dep with probe. A dependency without a probe
// (the gateway) comes back when an event held for it goes through: that
// retry is its probe.
func (p *Pause) SetProbe(dep order.Dependency, probe Probe) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes[dep] = probe
}

// Started marks the start-up checks done: from now on the process is ready
// whenever no dependency is down.
func (p *Pause) Started() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
}

// Outage pauses consumption because dep is unavailable, found by something
// other than an event (a start-up check). No event is held for it: see
// Pause for how it ends.
func (p *Pause) Outage(dep order.Dependency, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outageLocked(dep, err)
}

// outageLocked marks dep down, if it is not, and returns its outage; p.mu
// is held.
func (p *Pause) outageLocked(dep order.Dependency, err error) *outage {
	if o, ok := p.down[dep]; ok {
		return o
	}
	now := time.Now()
	o := &outage{dep: dep, err: err, since: now, retry: make(chan struct{})}
	p.down[dep] = o
	if len(p.down) > 1 {
		p.log.Error("dependency unavailable", slog.String("dependency", string(dep)), slog.String("error", err.Error()))
		return o
	}
	p.since = now
	p.resumed = make(chan struct{})
	p.gauge.Set(1)
	p.log.Error("consumption paused: dependency unavailable", slog.String("dependency", string(dep)), slog.String("error", err.Error()))
	return o
}

// Hold returns a Holding of p that holds nothing yet: a routed write's,
// which may meet Kafka's outage itself. p may be nil (no pause: Meet and
// HoldOff must then not be called).
func (p *Pause) Hold() Holding { return Holding{p: p} }

// ResumeCount returns how many outages have ended so far; an event reads
// it before an attempt, for Stale.
func (p *Pause) ResumeCount() uint64 { return p.resumes.Load() }

// Stale reports whether an outage of dep met by an attempt begun when
// ResumeCount was began is no evidence that dep is down: dep is up, and an
// outage has ended since the attempt began. The attempt was in flight when
// that outage began (a gateway call that timed out after the probe that
// ended it succeeded, a query queued behind the same lost connection), and
// its failure belongs to it: the event tries again at once rather than
// pause consumption that has just resumed. An attempt begun after the
// resume that meets the same is evidence.
func (p *Pause) Stale(dep order.Dependency, began uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, down := p.down[dep]
	return !down && p.resumes.Load() != began
}

// Holding is one event's part in the outages it met: the event is held for
// each of them until it gets an answer from that dependency (Answered) or
// leaves without one (Leave). A Pause makes them (Admit, Hold); an event
// carries its own.
type Holding struct {
	p       *Pause
	outages []heldFor
}

// heldFor is one outage an event is held for, and how many times its
// held events had been woken when the event last met it.
type heldFor struct {
	o    *outage
	seen uint64
}

// meet records that the event met dep's outage (err): dep is down, and the
// event is held for it until Answered or Leave.
func (h *Holding) Meet(dep order.Dependency, err error) {
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.outageLocked(dep, err)
	for i := range h.outages {
		if h.outages[i].o == o {
			h.outages[i].seen = o.woke
			return
		}
	}
	o.held++
	h.outages = append(h.outages, heldFor{o, o.woke})
}

// HoldOff waits d before the event, held for dep, tries again; less when a
// probe finds dep answering or dep's outage ends, also if that happened
// since the event met the outage and before it began to wait. It returns
// ctx's error if ctx ends first.
func (h *Holding) HoldOff(ctx context.Context, dep order.Dependency, d time.Duration) error {
	p := h.p
	p.mu.Lock()
	o, down := p.down[dep]
	woken := !down
	for _, f := range h.outages {
		if f.o == o && f.seen != o.woke {
			woken = true
		}
	}
	var retry <-chan struct{}
	if down {
		retry = o.retry
	}
	p.mu.Unlock()
	if woken {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-retry:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Answered records that the event got past the outages it was held for:
// it succeeded with outcome, or (outcome "") failed with an error that is
// neither an outage nor a fault of its own bytes, so its dependency
// answered. Each outage the answer is evidence about ends (Resume); the
// event is held for none any more.
func (h *Holding) Answered(outcome order.Outcome) {
	for _, f := range h.outages {
		if proves(f.o.dep, outcome) {
			h.p.Resume(f.o.dep)
		}
	}
	h.Leave()
}

// proves reports whether an event that ended with outcome ("": an answer
// that was an error) got an answer from dep. A duplicate is settled by
// Postgres alone: it says nothing about the gateway.
func proves(dep order.Dependency, outcome order.Outcome) bool {
	if dep == order.DependencyGateway {
		return outcome != order.OutcomeDuplicate && outcome != order.OutcomeDuplicateOrder
	}
	return true
}

// Leave lets go of the outages the event is still held for: it is done
// with, or gave way to a rebalance or shutdown. The last event leaving an
// outage without a probe wants the next record fetched as its probe event
// (see Pause).
func (h *Holding) Leave() {
	if len(h.outages) == 0 {
		return
	}
	p := h.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range h.outages {
		o := f.o
		o.held--
		if o.held == 0 && p.down[o.dep] == o && p.probes[o.dep] == nil {
			close(p.wanted)
			p.wanted = make(chan struct{})
		}
	}
	h.outages = nil
}

// wantsProbe returns an outage that wants a probe event: down, without a
// probe, no event held for it; nil if none. p.mu is held.
func (p *Pause) wantsProbe() *outage {
	var found *outage
	for dep, o := range p.down {
		if o.held == 0 && p.probes[dep] == nil && (found == nil || dep < found.dep) {
			found = o
		}
	}
	return found
}

// Admit waits until a record just fetched may be handled: nothing is down,
// or, from eligible on, the record is let through as the probe event of an
// outage that wants one. The returned Holding is the event's: held for that
// outage, or for nothing. false when ctx ended first.
func (p *Pause) Admit(ctx context.Context, eligible time.Time) (Holding, bool) {
	for {
		p.mu.Lock()
		if len(p.down) == 0 {
			p.mu.Unlock()
			return Holding{p: p}, true
		}
		wait := time.Duration(-1) // until something changes
		if o := p.wantsProbe(); o != nil {
			if wait = time.Until(eligible); wait <= 0 {
				o.held++
				p.mu.Unlock()
				p.log.Info("record let through as the probe of an outage no event is held for",
					slog.String("dependency", string(o.dep)))
				return Holding{p: p, outages: []heldFor{{o, o.woke}}}, true
			}
		}
		resumed, wanted := p.resumed, p.wanted
		p.mu.Unlock()
		if !waitChange(ctx, resumed, wanted, wait) {
			return Holding{}, false
		}
	}
}

// waitChange waits until resumed or wanted is closed, or wait has passed
// (never when negative); false when ctx ended first.
func waitChange(ctx context.Context, resumed, wanted <-chan struct{}, wait time.Duration) bool {
	var timeout <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-resumed:
	case <-wanted:
	case <-timeout:
	case <-ctx.Done():
		return false
	}
	return true
}

// AwaitFetch blocks while paused, unless an outage wants a probe event;
// false when ctx ended first.
func (p *Pause) AwaitFetch(ctx context.Context) bool {
	for {
		p.mu.Lock()
		if len(p.down) == 0 || p.wantsProbe() != nil {
			p.mu.Unlock()
			return true
		}
		resumed, wanted := p.resumed, p.wanted
		p.mu.Unlock()
		if !waitChange(ctx, resumed, wanted, -1) {
			return false
		}
	}
}

// probed records a probe's success for dep: it ends dep's outage when no
// event is held for it, and otherwise lets the events held for dep retry at
// once, once per time the probe turns from failing (or unknown) to
// answering.
func (p *Pause) probed(dep order.Dependency) {
	p.mu.Lock()
	o, ok := p.down[dep]
	if !ok {
		p.mu.Unlock()
		return
	}
	if o.held == 0 {
		p.mu.Unlock()
		p.Resume(dep)
		return
	}
	defer p.mu.Unlock()
	if !o.probeOK {
		o.probeOK = true
		o.wake()
	}
}

// probeFailed records a probe's failure for dep.
func (p *Pause) probeFailed(dep order.Dependency, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o, ok := p.down[dep]; ok {
		o.probeOK = false
		return
	}
	p.outageLocked(dep, err)
}

// Resume is evidence that dep works again: its outage ends, the events
// still held for it retry at once, and with the last outage the pause ends.
func (p *Pause) Resume(dep order.Dependency) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.down[dep]
	if !ok {
		return
	}
	delete(p.down, dep)
	p.resumes.Add(1)
	o.wake()
	if len(p.down) > 0 {
		p.log.Info("dependency available again; still paused", slog.String("dependency", string(dep)),
			slog.Duration("down_for", time.Since(o.since)), slog.String("waiting_for", p.downList()))
		return
	}
	p.log.Info("consumption resumed", slog.String("dependency", string(dep)),
		slog.Duration("paused_for", time.Since(p.since)))
	close(p.resumed)
	p.gauge.Set(0)
}

// Paused reports whether consumption is paused, and for which dependencies.
func (p *Pause) Paused() (bool, []order.Dependency) {
	p.mu.Lock()
	defer p.mu.Unlock()
	deps := make([]order.Dependency, 0, len(p.down))
	for d := range p.down {
		deps = append(deps, d)
	}
	slices.Sort(deps)
	return len(deps) > 0, deps
}

// Ready reports whether the process should receive traffic: start-up is
// done and no dependency is down. It reads the same state that fetching
// waits on, so it turns ready the moment consumption resumes. why says
// what it waits for.
func (p *Pause) Ready() (ready bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var reasons []string
	if !p.started {
		reasons = append(reasons, "starting")
	}
	if len(p.down) > 0 {
		reasons = append(reasons, "paused: "+p.downList()+" unavailable")
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

// downList names the dependencies down, sorted; p.mu is held.
func (p *Pause) downList() string {
	names := make([]string, 0, len(p.down))
	for d := range p.down {
		names = append(names, string(d))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// ProbeOptions says how often Run probes.
type ProbeOptions struct {
	// Every is the interval of the health check while nothing is down: a
	// failed probe pauses consumption (an idle process notices an outage
	// too). Default 5s.
	Every time.Duration
	// WhilePaused is the interval of the probes of the dependencies that
	// are down, so that consumption resumes soon after they are back.
	// Default 500ms.
	WhilePaused time.Duration
	// Timeout bounds one probe. Default 5s.
	Timeout time.Duration
}

// Run probes the dependencies with a probe until ctx ends: every
// dependency each Every while none is down, and only the ones down each
// WhilePaused while paused. A failed probe pauses; the first success of a
// down dependency's probe resumes it, or makes the events held for it
// retry at once (see Pause).
func (p *Pause) Run(ctx context.Context, o ProbeOptions) {
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	if o.WhilePaused <= 0 {
		o.WhilePaused = 500 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	t := time.NewTimer(o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		paused := p.probeOnce(ctx, o.Timeout)
		if paused {
			t.Reset(o.WhilePaused)
		} else {
			t.Reset(o.Every)
		}
	}
}

// probeOnce probes every dependency when none is down, else those down; it
// reports whether the process is still paused.
func (p *Pause) probeOnce(ctx context.Context, timeout time.Duration) bool {
	p.mu.Lock()
	paused := len(p.down) > 0
	todo := map[order.Dependency]Probe{}
	for dep, probe := range p.probes {
		if _, isDown := p.down[dep]; isDown || !paused {
			todo[dep] = probe
		}
	}
	p.mu.Unlock()
	for dep, probe := range todo {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return paused
		case err == nil:
			p.probed(dep)
		default:
			p.probeFailed(dep, fmt.Errorf("probe: %w", err))
		}
	}
	still, _ := p.Paused()
	return still
}
