package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/core/order"
)

// Pause is the consumers' shared "a dependency is down" switch, and the one
// place that knows whether the process is ready (/readyz). An event that
// meets an outage marks its dependency down and keeps retrying itself;
// fetching waits while any dependency is down, so nothing new is taken, and
// nothing is routed to a retry tier or the DLQ because of the outage.
//
// A dependency comes back up on evidence about that same dependency, from
// the same kind of operation that failed: an event held for it that went
// through (Resume), or, for an outage that a probe found, that probe (Run).
// Evidence about another dependency does not end its outage, so that, say,
// duplicates answered by Postgres do not lift a pause for a gateway that
// refuses our credentials. A probe that answers while events are held for
// its dependency does not resume it by itself (Postgres answers a ping with
// a full disk): it makes the held events retry at once (HoldOff), and the
// first that goes through resumes consumption.
type Pause struct {
	mu      sync.Mutex
	started bool
	down    map[order.Dependency]*outage
	since   time.Time     // when the current pause began
	resumed chan struct{} // closed when the current pause ends
	probes  map[order.Dependency]Probe
	gauge   prometheus.Gauge
	log     *slog.Logger
}

// outage is why one dependency is down.
type outage struct {
	err     error
	since   time.Time
	byProbe bool          // found by a probe, so a probe's success ends it
	probeOK bool          // the last probe of it succeeded
	retry   chan struct{} // closed to end the HoldOff of events held for it
}

// Probe checks one dependency cheaply (a ping, a metadata request) within
// ctx's deadline.
type Probe func(ctx context.Context) error

// NewPause returns a switch reporting to gauge (billing_consumer_paused).
// It is not ready until Started is called.
func NewPause(gauge prometheus.Gauge, log *slog.Logger) *Pause {
	gauge.Set(0)
	return &Pause{gauge: gauge, log: log, down: map[order.Dependency]*outage{}, probes: map[order.Dependency]Probe{}}
}

// SetProbe makes Run check dep with probe. A dependency without a probe
// (the gateway, whose only safe request is a charge) comes back when an
// event held for it goes through: that retry is its probe.
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

// Outage pauses consumption because dep is unavailable: an event met err.
func (p *Pause) Outage(dep order.Dependency, err error) { p.outage(dep, err, false) }

func (p *Pause) outage(dep order.Dependency, err error, byProbe bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o, ok := p.down[dep]; ok {
		if !byProbe {
			o.byProbe = false // an event met it too: only an event's success ends it now
		}
		return
	}
	now := time.Now()
	p.down[dep] = &outage{err: err, since: now, byProbe: byProbe, retry: make(chan struct{})}
	if len(p.down) > 1 {
		p.log.Error("dependency unavailable", slog.String("dependency", string(dep)), slog.String("error", err.Error()))
		return
	}
	p.since = now
	p.resumed = make(chan struct{})
	p.gauge.Set(1)
	p.log.Error("consumption paused: dependency unavailable", slog.String("dependency", string(dep)), slog.String("error", err.Error()))
}

// HoldOff waits d before an event held for dep tries again, or less when a
// probe finds dep answering again. It returns ctx's error if ctx ends first.
func (p *Pause) HoldOff(ctx context.Context, dep order.Dependency, d time.Duration) error {
	var retry <-chan struct{}
	p.mu.Lock()
	if o, ok := p.down[dep]; ok {
		retry = o.retry
	}
	p.mu.Unlock()
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

// probed records a probe's success for dep: it ends an outage the probe
// found, and otherwise lets the events held for dep retry at once, once
// per time the probe turns from failing (or unknown) to answering.
func (p *Pause) probed(dep order.Dependency) {
	p.mu.Lock()
	o, ok := p.down[dep]
	if !ok {
		p.mu.Unlock()
		return
	}
	if o.byProbe {
		p.mu.Unlock()
		p.Resume(dep)
		return
	}
	defer p.mu.Unlock()
	if !o.probeOK {
		o.probeOK = true
		close(o.retry)
		o.retry = make(chan struct{})
	}
}

// probeFailed records a probe's failure for dep.
func (p *Pause) probeFailed(dep order.Dependency, err error) {
	p.mu.Lock()
	if o, ok := p.down[dep]; ok {
		o.probeOK = false
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.outage(dep, err, true)
}

// Resume is evidence that dep works again: its outage ends, and with the
// last outage the pause.
func (p *Pause) Resume(dep order.Dependency) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.down[dep]
	if !ok {
		return
	}
	delete(p.down, dep)
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

// Wait blocks while paused; false when ctx ended first.
func (p *Pause) Wait(ctx context.Context) bool {
	p.mu.Lock()
	if len(p.down) == 0 {
		p.mu.Unlock()
		return true
	}
	ch := p.resumed
	p.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
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
