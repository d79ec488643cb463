package kafka

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	kafkago "github.com/segmentio/kafka-go"
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

// The process's budget lets a charge through while it fits; over it, a
// batch only when nothing is held, a record only when no record is held;
// and waiters go on once enough is released.
func TestMemoryBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	b := NewMemoryBudget(100, nil)
	if err := b.AcquireBatch(ctx, 250); err != nil { // more than the budget, nothing held
		t.Fatal(err)
	}
	if err := b.AcquireBatch(short(), 1); err == nil {
		t.Fatal("a batch admitted over the budget while another is held")
	}
	// A record while no record is held: the batch's own records go on.
	if err := b.AcquireRecord(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := b.AcquireRecord(short(), 10); err == nil {
		t.Fatal("a second record admitted over the budget")
	}
	got := make(chan error)
	go func() { got <- b.AcquireRecord(ctx, 10) }()
	b.ReleaseRecord(10)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	b.ReleaseBatch(250)
	if all, records := b.Held(); all != 10 || records != 10 {
		t.Fatalf("held %d (%d records), want 10 (10)", all, records)
	}
	// Under the budget, both kinds fit side by side.
	if err := b.AcquireBatch(ctx, 60); err != nil {
		t.Fatal(err)
	}
	if err := b.AcquireRecord(ctx, 30); err != nil {
		t.Fatal(err)
	}
	if err := b.AcquireBatch(short(), 1); err == nil {
		t.Fatal("a batch admitted past the budget")
	}
	b.ReleaseRecord(40)
	b.ReleaseBatch(60)
	if all, records := b.Held(); all != 0 || records != 0 {
		t.Errorf("held %d (%d records) after every release", all, records)
	}
}

// A record's own headers are all but the first of each header the service
// adds; DecodedRecordHeaders leaves room for those.
func TestOwnHeaders(t *testing.T) {
	t.Parallel()
	if DecodedRecordHeaders != MaxRecordHeaders+len(serviceHeaders) {
		t.Fatalf("DecodedRecordHeaders = %d, want %d + %d", DecodedRecordHeaders, MaxRecordHeaders, len(serviceHeaders))
	}
	hs := []Header{{Key: "a"}, {Key: HeaderOriginalTopic}, {Key: HeaderOriginalTopic}, {Key: HeaderReplayedAt}, {Key: "x-other"}, {Key: "traceparent"}}
	if got := ownHeaders(hs); got != 4 {
		t.Errorf("ownHeaders = %d, want 4 (a, the second x-original-topic, x-other, traceparent)", got)
	}
}

// The budget counts what a record holds in memory, not its size on the
// wire: an empty header is two bytes on the wire and a
// Go struct in memory, so 900 KB of them held twenty times more than
// counted. Each record here is built as kafka-go decodes one (a slice of
// headers, a new string and byte slice per non-empty key and value) and
// turned into a Record as the source hands it on (recordOf), and what that
// allocated must not be more than the budget counts for it: the conversion
// shares the message's bytes and headers, it does not add a copy.
// Not parallel: it reads the process's allocation counter.
func TestRecordBytesCountsWhatARecordHolds(t *testing.T) {
	for _, tc := range []struct {
		name                string
		headers, key, value int // headers, and the bytes of each one's key and value
		body                int
	}{
		{"the most empty headers a record may carry", MaxRecordHeaders, 0, 0, 200},
		{"the most one-byte headers a record may carry", MaxRecordHeaders, 1, 1, 200},
		{"a few headers, a large value", 3, 11, 55, 1_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m := kafkago.Message{Key: make([]byte, 12), Value: make([]byte, tc.body), Headers: make([]kafkago.Header, tc.headers)}
			for i := range m.Headers {
				if tc.key > 0 {
					m.Headers[i].Key = string(make([]byte, tc.key))
				}
				if tc.value > 0 {
					m.Headers[i].Value = make([]byte, tc.value)
				}
			}
			rec := recordOf(m)
			runtime.ReadMemStats(&after)
			held := after.TotalAlloc - before.TotalAlloc
			if got := recordBytes(rec); got < int64(held)*9/10 {
				t.Errorf("recordBytes = %d, the record allocated %d bytes", got, held)
			}
			runtime.KeepAlive(rec)
		})
	}
}

// A release that nobody waits for allocates nothing: every event releases
// its bytes, and a budget's waiters are the exception (a full budget).
func TestReleaseWithoutWaitersAllocatesNothing(t *testing.T) {
	b := newByteBudget(1 << 20)
	m := NewMemoryBudget(1<<20, nil)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if !b.acquire(ctx, 10) || m.AcquireRecord(ctx, 10) != nil {
			t.Fatal("a record that fits was refused")
		}
		b.release(10)
		m.ReleaseRecord(10)
	})
	if allocs != 0 {
		t.Errorf("an acquire and release without waiters: %v allocations, want 0", allocs)
	}
}

// A record that waits for room is woken by the release that makes it, and
// by every release until it fits; one whose context ends leaves, and the
// releases after it still wake the others.
func TestBudgetWakesItsWaiters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := newByteBudget(10)
		ctx := context.Background()
		if !b.acquire(ctx, 10) {
			t.Fatal("a record that fits was refused")
		}
		gone, leave := context.WithCancel(ctx)
		left := make(chan bool)
		go func() { left <- b.acquire(gone, 10) }()
		got := make(chan bool)
		go func() { got <- b.acquire(ctx, 6) }()
		synctest.Wait() // both wait
		leave()
		if <-left {
			t.Fatal("a waiter whose context ended was admitted")
		}
		b.release(3) // 7 held: still no room for 6
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a waiter was admitted without room")
		default:
		}
		b.release(3) // 4 held
		if !<-got {
			t.Fatal("the waiter was not admitted once there was room")
		}
	})
}
