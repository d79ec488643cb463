package kafka

import (
	"context"
	"sync"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/billing/internal/metrics"
)

// MemoryBudget is the one budget of a process for what it reads from Kafka
// (docs/design.md, "Memory"): the compressed bytes of a batch being
// decompressed and its decompressed contents, and every record from the
// moment it is decoded until its outcome is final, on every partition of
// every topic the process consumes. The patched kafka-go charges it before
// it allocates (third_party/kafka-go/PATCHES.md, billing.4); a record's
// charge travels with it (Record) and the consumer releases it once the
// record's outcome is final. It implements kafka-go's Budget.
//
// A charge that does not fit waits for releases. Two exceptions keep every
// reader moving, each going over the budget by at most one charge: a batch
// is let through when nothing at all is held (a batch larger than the whole
// budget still goes, alone), and a record when no record is held (a reader
// holding a decompressed batch decodes its records one at a time, and must
// not wait on other batches that wait for theirs).
type MemoryBudget struct {
	waits
	max     int64
	used    int64 // records and batches
	records int64 // of used, records
	held    prometheus.Gauge
}

// NewMemoryBudget returns a budget of max bytes, exported in
// billing_read_budget_bytes when m is not nil.
func NewMemoryBudget(max int64, m *metrics.ReadBudget) *MemoryBudget {
	b := &MemoryBudget{waits: newWaits(), max: max}
	if m != nil {
		m.Bytes.WithLabelValues("limit").Set(float64(max))
		b.held = m.Bytes.WithLabelValues("held")
	}
	return b
}

// show exports what is held; called under the lock.
func (b *MemoryBudget) show() {
	if b.held != nil {
		b.held.Set(float64(b.used))
	}
}

// AcquireRecord takes n bytes for a record about to be decoded.
func (b *MemoryBudget) AcquireRecord(ctx context.Context, n int64) error {
	return b.wait(ctx, func() bool {
		if b.records > 0 && b.used+n > b.max {
			return false
		}
		b.used += n
		b.records += n
		b.show()
		return true
	})
}

// ReleaseRecord gives back n bytes of records.
func (b *MemoryBudget) ReleaseRecord(n int64) {
	b.changed(func() {
		b.used -= n
		b.records -= n
		b.show()
	})
}

// AcquireBatch takes n bytes for a compressed batch's bytes.
func (b *MemoryBudget) AcquireBatch(ctx context.Context, n int64) error {
	return b.wait(ctx, func() bool {
		if b.used > 0 && b.used+n > b.max {
			return false
		}
		b.used += n
		b.show()
		return true
	})
}

// ReleaseBatch gives back n bytes of batches.
func (b *MemoryBudget) ReleaseBatch(n int64) {
	b.changed(func() {
		b.used -= n
		b.show()
	})
}

// Held returns the bytes held, and of them the records'.
func (b *MemoryBudget) Held() (all, records int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.records
}

// Max returns the budget's size.
func (b *MemoryBudget) Max() int64 { return b.max }

// waits is what a budget's waiters share: a lock over the budget's counts,
// and a channel closed (and replaced) when they change while someone waits.
type waits struct {
	mu    sync.Mutex
	freed chan struct{}
	// watched: a waiter took freed since it was last replaced. Without
	// one, a change has nobody to wake, and keeps the channel: every event
	// releases its bytes, and waiting (a full budget) is the exception.
	watched bool
}

func newWaits() waits { return waits{freed: make(chan struct{})} }

// wait calls take under the lock until it returns true (it took what it
// needed), or ctx ends first: then it returns ctx's error.
func (w *waits) wait(ctx context.Context, take func() bool) error {
	for {
		w.mu.Lock()
		if take() {
			w.mu.Unlock()
			return nil
		}
		ch := w.freed
		w.watched = true
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changed applies f under the lock and wakes the waiters.
func (w *waits) changed(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
	if w.watched {
		close(w.freed)
		w.freed = make(chan struct{})
		w.watched = false
	}
}

// byteBudget bounds one consumer's share of the process's budget: the
// bytes of the records it holds between fetch and final outcome, as they
// are held in memory (recordBytes). The records are already charged to the
// MemoryBudget when they are decoded; this share only keeps one topic from
// taking all of it: a retry tier holds its records until their
// x-not-before, up to minutes, and must not starve the main topic. A
// record larger than the whole share still goes through, alone.
type byteBudget struct {
	waits
	max  int64
	used int64
}

func newByteBudget(maxBytes int64) *byteBudget {
	return &byteBudget{waits: newWaits(), max: maxBytes}
}

// acquire waits until n bytes fit (or nothing is held); false when ctx
// ended first.
func (b *byteBudget) acquire(ctx context.Context, n int64) bool {
	return b.wait(ctx, func() bool {
		if b.used != 0 && b.used+n > b.max {
			return false
		}
		b.used += n
		return true
	}) == nil
}

// release returns n bytes taken by acquire.
func (b *byteBudget) release(n int64) { b.changed(func() { b.used -= n }) }

// recordBytes is what a fetched record holds in memory, near enough: its
// key and value, and per header a Header struct (a string and a slice
// header; the record shares kafka-go's array of them, see recordOf) plus
// the allocations of a non-empty key and value. Counted by their bytes on
// the wire, headers are nearly free (an empty one is two bytes), while in
// memory each is a struct of 40 bytes: 900 KB of empty headers held 18 MB,
// and 160 such records took the process past its memory limit while the
// budget saw 140 MB. It is the count kafka-go charges the MemoryBudget
// with (kafkago.MessageBytes).
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
