package kafka

import (
	"context"
	"runtime"
	"testing"
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
		{"450,000 empty headers", 450_000, 0, 0, 200},
		{"100,000 one-byte headers", 100_000, 1, 1, 200},
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
