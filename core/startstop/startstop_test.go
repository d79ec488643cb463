package startstop

import (
	"context"
	"errors"
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
