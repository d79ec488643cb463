package kafka

import (
	"context"
	"sync"
	"unsafe"
)

// byteBudget bounds the bytes of the records a consumer holds between fetch
// and final outcome, as they are held in memory (recordBytes). MaxInFlight alone bounds their number, which with 1 MB
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

// recordBytes is what a fetched record holds in memory, near enough: its
// key and value, and per header a Header struct (a string and a slice
// header; the record shares kafka-go's array of them, see recordOf) plus
// the allocations of a non-empty key and value. Counted by their bytes on
// the wire, headers are nearly free (an empty one is two bytes), while in
// memory each is a struct of 40 bytes: 900 KB of empty headers held 18 MB,
// and 160 such records took the process past its memory limit while the
// budget saw 140 MB.
func recordBytes(m Record) int64 {
	n := int64(len(m.Key)+len(m.Value)) + int64(len(m.Headers))*headerStructBytes
	for _, h := range m.Headers {
		n += allocBytes(len(h.Key)) + allocBytes(len(h.Value))
	}
	return n
}

// headerStructBytes is the size of one Header, and of one kafka-go header.
const headerStructBytes = int64(unsafe.Sizeof(Header{}))

// allocBytes is what an allocation of n bytes takes on the heap, about:
// nothing for none, else n rounded up to 16 (Go's small size classes).
func allocBytes(n int) int64 {
	if n == 0 {
		return 0
	}
	return int64(n+15) &^ 15
}
