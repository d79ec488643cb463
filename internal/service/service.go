// Package service is the start/stop lifecycle of billing's background
// services (the outbox relay, the pending completer, the dedup
// maintainer, each a package below this one): Start runs a loop in a
// goroutine of its own until its context ends or Stop is called; Stop
// cancels it and waits for it. It is river's rivershared/startstop idea,
// cut down to what billing uses, so that every background service stops
// the same way and none of its goroutines lives in the domain (core/order
// holds the rules of one pass; the loop around it lives here).
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Service is what Run starts and stops: one owner of its goroutines.
type Service interface {
	// Start starts the service's goroutines under ctx and returns; they
	// run until ctx ends or Stop is called.
	Start(ctx context.Context) error
	// Stop ends them and waits for them; a no-op when not started.
	Stop()
}

// ErrRunning: Start was called twice without Stop.
var ErrRunning = errors.New("already running")

// Base runs one loop at a time. The zero value is ready; embed it or keep
// one per service.
type Base struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs loop(ctx) in a goroutine until ctx ends or Stop is called; it
// returns ErrRunning if a loop is already running.
func (b *Base) Start(ctx context.Context, loop func(ctx context.Context)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		return ErrRunning
	}
	ctx, b.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	b.done = done
	go func() {
		defer close(done)
		loop(ctx)
	}()
	return nil
}

// Stop cancels the running loop and waits for it to return; a no-op when
// none runs.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel, b.done = nil, nil
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Sleep waits d, or less if ctx ends first; it reports whether d passed.
// It is the pause between a background service's passes.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Loop is a service whose whole work is one loop function, for the loops
// that are not a package of their own (a probe, a gauge's refresh): Start
// runs run(ctx) in a goroutine until ctx ends or Stop is called.
type Loop struct {
	run  func(ctx context.Context)
	base Base
}

var _ Service = (*Loop)(nil)

// NewLoop returns the service of run; run must return once its ctx ends.
func NewLoop(run func(ctx context.Context)) *Loop { return &Loop{run: run} }

// Start runs the loop; it fails (ErrRunning) if it runs already.
func (l *Loop) Start(ctx context.Context) error { return l.base.Start(ctx, l.run) }

// Stop ends the loop and waits for it.
func (l *Loop) Stop() { l.base.Stop() }

// Sequence starts services one after another and stops the ones it
// started in the reverse order: what starts later may depend on what
// started before, and must be gone before it. The zero value is ready.
type Sequence struct {
	started []Service
}

// Start starts each of svcs in turn under ctx; the first that fails to
// start ends it with its error, named (the ones before it stay started,
// for Stop).
func (s *Sequence) Start(ctx context.Context, svcs ...Named) error {
	for _, n := range svcs {
		if err := n.Service.Start(ctx); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		s.started = append(s.started, n.Service)
	}
	return nil
}

// Stop stops the started services, the last started first, each Stop
// returning before the next begins.
func (s *Sequence) Stop() {
	for i := len(s.started) - 1; i >= 0; i-- {
		s.started[i].Stop()
	}
	s.started = nil
}

// Named is a service and the name its failure to start is reported under.
type Named struct {
	Name    string
	Service Service
}
