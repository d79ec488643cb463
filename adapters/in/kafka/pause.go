package kafka

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Pause is the consumers' shared "a dependency is down" switch. An event
// that meets an outage sets it and keeps retrying itself; fetching waits
// while it is set, so nothing new is taken, and nothing is routed to a retry
// tier or the DLQ because of the outage. The first success clears it.
type Pause struct {
	mu      sync.Mutex
	paused  bool
	dep     string
	since   time.Time
	resumed chan struct{} // closed when the current pause ends
	gauge   prometheus.Gauge
	log     *slog.Logger
}

// NewPause returns an unpaused switch reporting to gauge (billing_consumer_paused).
func NewPause(gauge prometheus.Gauge, log *slog.Logger) *Pause {
	gauge.Set(0)
	return &Pause{gauge: gauge, log: log}
}

// Outage pauses consumption because dep is unavailable.
func (p *Pause) Outage(dep string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		return
	}
	p.paused, p.dep, p.since = true, dep, time.Now()
	p.resumed = make(chan struct{})
	p.gauge.Set(1)
	p.log.Error("consumption paused: dependency unavailable", slog.String("dependency", dep), slog.String("error", err.Error()))
}

// Resume ends a pause; evidence that dep works again.
func (p *Pause) Resume(dep string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		return
	}
	p.log.Info("consumption resumed", slog.String("dependency", p.dep), slog.String("evidence_from", dep),
		slog.Duration("paused_for", time.Since(p.since)))
	p.paused = false
	close(p.resumed)
	p.gauge.Set(0)
}

// Paused reports whether consumption is paused, and for which dependency.
func (p *Pause) Paused() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.dep
}

// Wait blocks while paused; false when ctx ended first.
func (p *Pause) Wait(ctx context.Context) bool {
	p.mu.Lock()
	if !p.paused {
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
