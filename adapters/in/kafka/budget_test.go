package kafka

import (
	"context"
	"testing"
	"time"
)

// The budget admits records while they fit, one record larger than the
// whole budget alone, and a waiting record once enough is released.
func TestByteBudget(t *testing.T) {
	t.Parallel()
	b := newByteBudget(10)
	ctx := context.Background()
	if !b.acquire(ctx, 6) || !b.acquire(ctx, 4) {
		t.Fatal("records that fit were refused")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if b.acquire(short, 1) {
		t.Fatal("a record beyond the budget was admitted")
	}
	got := make(chan bool)
	go func() { got <- b.acquire(ctx, 5) }()
	b.release(6)
	if !<-got {
		t.Fatal("a waiting record was not admitted after a release")
	}
	b.release(4)
	b.release(5)
	if !b.acquire(ctx, 100) {
		t.Fatal("a record larger than the budget was refused with nothing held")
	}
}
