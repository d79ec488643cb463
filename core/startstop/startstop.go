// Package startstop is the start/stop lifecycle of billing's background
// services (the pending completer, the outbox relay, the dedup
// maintainer): Start runs a loop in a goroutine of its own until its
// context ends or Stop is called; Stop cancels it and waits for it. It is
// river's startstop.BaseStartStop, cut down to what billing uses, so that
// every background service stops the same way.
package startstop

import (
	"context"
	"errors"
	"sync"
	"time"
)

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
