package service

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestStartStop(t *testing.T) {
	t.Parallel()
	var b Base
	started, stopped := make(chan struct{}), make(chan struct{})
	loop := func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(stopped)
	}
	if err := b.Start(t.Context(), loop); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := b.Start(t.Context(), loop); !errors.Is(err, ErrRunning) {
		t.Errorf("second Start() = %v, want ErrRunning", err)
	}
	b.Stop()
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the loop did")
	}
	b.Stop() // a no-op
	again := make(chan struct{})
	if err := b.Start(t.Context(), func(context.Context) { close(again) }); err != nil {
		t.Fatalf("Start() after Stop = %v", err)
	}
	<-again
	b.Stop()
}

func TestStartEndsWithItsContext(t *testing.T) {
	t.Parallel()
	var b Base
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	if err := b.Start(ctx, func(ctx context.Context) { <-ctx.Done(); close(done) }); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	b.Stop()
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if !Sleep(t.Context(), time.Millisecond) {
		t.Error("Sleep(1ms) = false, want true")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep(cancelled, 1h) = true, want false")
	}
}

func TestLoop(t *testing.T) {
	t.Parallel()
	stopped := make(chan struct{})
	l := NewLoop(func(ctx context.Context) { <-ctx.Done(); close(stopped) })
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(t.Context()); !errors.Is(err, ErrRunning) {
		t.Errorf("second Start() = %v, want ErrRunning", err)
	}
	l.Stop()
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the loop did")
	}
}

// recorder is a service that notes its starts and stops in a shared log,
// and fails to start when told.
type recorder struct {
	name string
	log  *[]string
	fail error
}

func (r *recorder) Start(context.Context) error {
	if r.fail != nil {
		return r.fail
	}
	*r.log = append(*r.log, "start "+r.name)
	return nil
}

func (r *recorder) Stop() { *r.log = append(*r.log, "stop "+r.name) }

// A sequence stops what it started in the reverse order; a start that
// fails ends Start with its name, and what started before it is stopped,
// what comes after is never started.
func TestSequence(t *testing.T) {
	t.Parallel()
	var log []string
	svc := func(name string, fail error) Named { return Named{name, &recorder{name: name, log: &log, fail: fail}} }
	var s Sequence
	if err := s.Start(t.Context(), svc("a", nil), svc("b", nil)); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	if err := s.Start(t.Context(), svc("c", nil), svc("d", refused), svc("e", nil)); !errors.Is(err, refused) || err.Error() != "d: refused" {
		t.Errorf("Start() = %v, want d's error, named", err)
	}
	s.Stop()
	s.Stop() // a no-op: everything is stopped
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Errorf("log = %q, want %q", log, want)
	}
}
