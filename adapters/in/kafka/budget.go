package kafka

import (
	"context"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
)

// byteBudget bounds the bytes of the records a consumer holds between fetch
// and final outcome. MaxInFlight alone bounds their number, which with 1 MB
// records let a process hold far more than its memory limit; the budget
// makes large records queue at the fetcher (where Kafka keeps them) instead.
// A record larger than the whole budget still goes through, alone.
type byteBudget struct {
	mu    sync.Mutex
	max   int64
	used  int64
	freed chan struct{} // closed and replaced on every release
}

func newByteBudget(maxBytes int64) *byteBudget {
	return &byteBudget{max: maxBytes, freed: make(chan struct{})}
}

// acquire waits until n bytes fit (or nothing is held); false when ctx ended
// first.
func (b *byteBudget) acquire(ctx context.Context, n int64) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// release returns n bytes taken by acquire.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
}

// recordBytes is what a fetched record holds in memory, near enough.
func recordBytes(m kafkago.Message) int64 {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}
