package health

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/metrics"
)

func newTestPause(t *testing.T) (*Pause, prometheus.Gauge) {
	t.Helper()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "paused"})
	return NewPause(&metrics.Outage{Paused: g}, slog.New(slog.DiscardHandler)), g
}

// Readiness is the pause's own state: not ready until started, not ready
// while any dependency is down, ready the moment the last one is back.
func TestPauseReadiness(t *testing.T) {
	t.Parallel()
	p, g := newTestPause(t)
	if ok, why := p.Ready(); ok || why != "starting" {
		t.Errorf("before Started: Ready() = %v, %q; want false, starting", ok, why)
	}
	p.Started()
	if ok, _ := p.Ready(); !ok {
		t.Error("after Started: not ready")
	}
	p.Outage(order.DependencyGateway, errors.New("401"))
	p.Outage(order.DependencyPostgres, errors.New("disk full"))
	if ok, why := p.Ready(); ok || why != "paused: gateway, postgres unavailable" {
		t.Errorf("two outages: Ready() = %v, %q", ok, why)
	}
	if testutil.ToFloat64(g) != 1 {
		t.Error("gauge not 1 while paused")
	}
	p.Resume(order.DependencyPostgres)
	if ok, _ := p.Ready(); ok {
		t.Error("ready while the gateway is still down: evidence about Postgres ended the gateway's outage")
	}
	p.Resume(order.DependencyGateway)
	if ok, _ := p.Ready(); !ok || testutil.ToFloat64(g) != 0 {
		t.Error("not ready, or gauge not 0, after every dependency came back")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if !p.AwaitFetch(ctx) {
		t.Error("fetching still waits after the pause ended")
	}
}

// advance lets fake time pass in a synctest bubble, then waits until every
// goroutine of the bubble is blocked again (the probes due have run).
func advance(d time.Duration) {
	<-time.After(d) // fake time: the bubble's clock jumps, nothing sleeps
	synctest.Wait()
}

// An outage a probe found ends with the probe's first success. An outage an
// event met does not (a ping proves nothing about a full disk): the probe's
// success makes the held events retry at once instead.
//
// On fake time (a synctest bubble), so each step is checked right after
// the probe that must have made it: the probes' cadence is part of what is
// tested, and no wait depends on how fast the machine is.
func TestPauseProbes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		p, _ := newTestPause(t)
		p.Started()
		var pgUp, kafkaUp atomic.Bool
		pgUp.Store(true)
		probe := func(up *atomic.Bool) Probe {
			return func(context.Context) error {
				if up.Load() {
					return nil
				}
				return errors.New("connection refused")
			}
		}
		p.SetProbe(order.DependencyPostgres, probe(&pgUp))
		p.SetProbe(order.DependencyKafka, probe(&kafkaUp))
		const every, whilePaused = 5 * time.Second, 500 * time.Millisecond
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Run(ctx, ProbeOptions{Every: every, WhilePaused: whilePaused})
		}()
		defer func() { cancel(); <-done }()
		ready := func() bool { ok, _ := p.Ready(); return ok }

		// Kafka down, found by the first probe, one interval in: paused;
		// back: resumed by the next probe, one paused interval later.
		advance(every - time.Millisecond)
		if !ready() {
			t.Fatal("paused before the first probe")
		}
		advance(time.Millisecond)
		if ready() {
			t.Fatal("the first probe did not find kafka down")
		}
		kafkaUp.Store(true)
		advance(whilePaused)
		if !ready() {
			t.Fatal("the probe after kafka came back did not resume")
		}

		// Postgres failing an event while its ping answers: the probe does
		// not resume it, but ends the held event's wait at the next probe,
		// not after the hour the event would wait.
		held := Holding{p: p}
		held.Meet(order.DependencyPostgres, errors.New("disk full"))
		wait := make(chan error, 1)
		go func() { wait <- held.HoldOff(ctx, order.DependencyPostgres, time.Hour) }()
		advance(every)
		select {
		case err := <-wait:
			if err != nil {
				t.Fatalf("HoldOff: %v", err)
			}
		default:
			t.Fatal("the probe's success did not end the held event's wait")
		}
		if ready() {
			t.Fatal("a ping ended an outage that an event met")
		}
		held.Answered(order.OutcomeCharged) // the held event went through
		if !ready() {
			t.Error("not ready after the held event went through")
		}
	})
}

// An outage with no event held for it any more (the last gave way to a
// rebalance) must still be able to end: without a probe,
// the next record fetched is let through as its probe event, one at a time,
// and that event's answer ends it; with a probe, the probe's success ends
// it.
func TestPauseOutageWithoutHeldEvents(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, _ := newTestPause(t)
	p.Started()

	// The gateway: the held event gives way; fetching may take one record,
	// which starts held for the outage; a second waits behind it.
	held := Holding{p: p}
	held.Meet(order.DependencyGateway, errors.New("connection refused"))
	if !p.wantsNone() {
		t.Fatal("an outage with an event held for it wants a probe event")
	}
	held.Leave()
	if !p.AwaitFetch(ctx) {
		t.Fatal("fetching still waits for an outage no event is held for")
	}
	probe, ok := p.Admit(ctx, time.Now())
	if !ok || len(probe.outages) != 1 {
		t.Fatalf("Admit = %+v, %v; want the record let through held for the gateway", probe, ok)
	}
	second, cancelSecond := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, ok := p.Admit(second, time.Now()); ok {
		t.Error("a second record let through while the probe event is in flight")
	}
	cancelSecond()
	// A duplicate Answered by Postgres says nothing about the gateway: the
	// outage wants the next record.
	probe.Answered(order.OutcomeDuplicate)
	if ok, _ := p.Ready(); ok {
		t.Fatal("a duplicate ended the gateway's outage")
	}
	probe, ok = p.Admit(ctx, time.Now())
	if !ok {
		t.Fatal("no record let through after the probe event left")
	}
	// A tier record is not the probe before it may be handled.
	probe.Leave()
	early, cancelEarly := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, ok := p.Admit(early, time.Now().Add(time.Hour)); ok {
		t.Error("a record that may not be handled for an hour let through as the probe")
	}
	cancelEarly()
	probe, _ = p.Admit(ctx, time.Now())
	probe.Answered(order.OutcomeCharged)
	if ok, _ := p.Ready(); !ok {
		t.Fatal("the probe event's charge did not end the gateway's outage")
	}

	// Postgres, with a probe: no record is let through; the probe's
	// success ends the outage once no event is held for it.
	p.SetProbe(order.DependencyPostgres, func(context.Context) error { return nil })
	held = Holding{p: p}
	held.Meet(order.DependencyPostgres, errors.New("disk full"))
	held.Leave()
	if !p.wantsNone() {
		t.Error("an outage of a dependency with a probe wants a probe event")
	}
	p.probeOnce(ctx, time.Second)
	if ok, _ := p.Ready(); !ok {
		t.Error("the probe's success did not end an outage no event is held for")
	}
}

// wantsNone reports whether no outage wants a probe event.
func (p *Pause) wantsNone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wantsProbe() == nil
}
