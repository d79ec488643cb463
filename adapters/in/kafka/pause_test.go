package kafka

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/poll"
)

func newTestPause(t *testing.T) (*Pause, prometheus.Gauge) {
	t.Helper()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "paused"})
	return NewPause(g, slog.New(slog.NewJSONHandler(io.Discard, nil))), g
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
	if !p.Wait(ctx) {
		t.Error("Wait blocked after the pause ended")
	}
}

// An outage a probe found ends with the probe's first success. An outage an
// event met does not (a ping proves nothing about a full disk): the probe's
// success makes the held events retry at once instead.
func TestPauseProbes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, ProbeOptions{Every: 10 * time.Millisecond, WhilePaused: 10 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()

	// Kafka down, found by the probe: paused; back: resumed by the probe.
	poll.Until(t, "the probe finds kafka down", 5*time.Second, func() bool { ok, _ := p.Ready(); return !ok })
	kafkaUp.Store(true)
	poll.Until(t, "the probe finds kafka back", 5*time.Second, func() bool { ok, _ := p.Ready(); return ok })

	// Postgres failing an event while its ping answers: the probe does not
	// resume it, but ends the held event's wait at once.
	p.Outage(order.DependencyPostgres, errors.New("disk full"))
	held := make(chan error, 1)
	go func() { held <- p.HoldOff(ctx, order.DependencyPostgres, time.Hour) }()
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("HoldOff: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the probe's success did not end the held event's wait")
	}
	if ok, _ := p.Ready(); ok {
		t.Fatal("a ping ended an outage that an event met")
	}
	p.Resume(order.DependencyPostgres) // the held event went through
	if ok, _ := p.Ready(); !ok {
		t.Error("not ready after the held event went through")
	}
}
