package kafka

// billing patch tests (see PATCHES.md, billing.4): compressed batches
// decompressed within a bound, stubs for those over it, and the budget
// charged with what reading holds.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/segmentio/kafka-go/compress"
	"github.com/segmentio/kafka-go/compress/snappy"
)

// codecs are the ones kafka-go reads, snappy in both framings.
var codecs = []struct {
	name  string
	codec CompressionCodec
	code  compress.Compression
}{
	{"gzip", compress.Gzip.Codec(), compress.Gzip},
	{"snappy xerial", &snappy.Codec{Framing: snappy.Framed}, compress.Snappy},
	{"snappy raw", &snappy.Codec{Framing: snappy.Unframed}, compress.Snappy},
	{"lz4", compress.Lz4.Codec(), compress.Lz4},
	{"zstd", compress.Zstd.Codec(), compress.Zstd},
}

// compressedBatch is a v2 batch at offset whose records, one per size, have
// values of that many zero bytes, compressed with codec as a producer writes
// them: a value of hundreds of megabytes costs its compressed bytes only.
func compressedBatch(t testing.TB, codec CompressionCodec, code compress.Compression, offset int64, sizes ...int) []byte {
	t.Helper()
	var z bytes.Buffer
	w := codec.NewWriter(&z)
	zero := make([]byte, 1<<16)
	for i, n := range sizes {
		var r []byte
		r = append(r, 0)                    // attributes
		r = varint(r, 0)                    // timestamp delta
		r = varint(r, int64(i))             // offset delta
		r = varint(r, -1)                   // no key
		r = varint(r, int64(n))             // value length
		l := varint(nil, int64(len(r)+n+1)) // then the value and a header count of 0
		if _, err := w.Write(append(l, r...)); err != nil {
			t.Fatal(err)
		}
		for left := n; left > 0; left -= len(zero) {
			if _, err := w.Write(zero[:min(left, len(zero))]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	values := make([]string, len(sizes))
	b := data(offset, -1, values...).encode()[:61]
	binary.BigEndian.PutUint32(b[8:], uint32(49+z.Len()))
	binary.BigEndian.PutUint16(b[21:], uint16(code))
	return append(b, z.Bytes()...)
}

// read reads raw as Conn.ReadBatchWith's Batch does, with limits, and
// returns its messages; each message's budget charge is released once read,
// as a caller done with it does.
func readLimited(t testing.TB, raw []byte, limits readLimits) []Message {
	t.Helper()
	msgs, err := newMessageSetReaderLimits(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil), limits)
	if err != nil {
		t.Fatal(err)
	}
	batch := &Batch{msgs: msgs}
	var out []Message
	for {
		m, err := batch.ReadMessage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %d messages: %v", len(out), err)
		}
		if limits.budget != nil {
			limits.budget.ReleaseRecord(MessageBytes(m))
		}
		m.Value = m.Value[:min(len(m.Value), 16)] // the test keeps no large value
		out = append(out, m)
	}
	if err := batch.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func omittedWhy(m Message) string {
	if len(m.Headers) == 1 && m.Headers[0].Key == BatchOmittedKey {
		return string(m.Headers[0].Value)
	}
	return ""
}

// A compressed batch over the bound, in every codec, is not decoded: each of
// its offsets comes back as a stub naming the batch, the records around it
// are read, and reading allocates about the compressed bytes, not the
// hundreds of megabytes they hold.
func TestBillingPatchBombEveryCodec(t *testing.T) {
	const limit = 1 << 20
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			raw := data(0, -1, "before").encode()
			raw = append(raw, compressedBatch(t, c.codec, c.code, 1, 16<<20, 16<<20, 1)...)
			raw = append(raw, compressedBatch(t, c.codec, c.code, 4, 100, 200)...) // within the bound: decoded
			raw = append(raw, data(6, -1, "after").encode()...)
			var got []Message
			alloc := allocated(func() { got = readLimited(t, raw, readLimits{maxBatch: limit}) })
			if len(got) != 7 {
				t.Fatalf("read %d messages, want 7", len(got))
			}
			for i, m := range got {
				if m.Offset != int64(i) {
					t.Errorf("message %d at offset %d", i, m.Offset)
				}
			}
			if string(got[0].Value) != "before" || string(got[6].Value) != "after" ||
				len(got[4].Value) != 16 || len(got[5].Value) != 16 || omittedWhy(got[4]) != "" {
				t.Errorf("records around the bomb: %q, %d and %d bytes, %q", got[0].Value, len(got[4].Value), len(got[5].Value), got[6].Value)
			}
			for _, m := range got[1:4] {
				why := omittedWhy(m)
				if why == "" || m.Key != nil || m.Value != nil {
					t.Errorf("offset %d: key %q, value %q, headers %v; want a stub", m.Offset, m.Key, m.Value, m.Headers)
				}
				want := fmt.Sprintf("%s record batch at base offset 1 (offsets 1-3): decompresses to more than %d bytes", c.codec.Name(), limit)
				if why != want {
					t.Errorf("stub at offset %d says %q, want it to start %q", m.Offset, why, want)
				}
			}
			// Besides the compressed bytes, a codec's state: a zstd decoder
			// holds a window (the writer's frames ask for 8 MiB), an lz4
			// reader blocks of 4 MiB (one reader a pass when a collection
			// emptied the codec's pool between them, which collections do
			// more often on a loaded machine). Decoded, the bomb would take twice its 32 MiB (its
			// bytes, and its records' copies): 24 MiB still tells the two
			// apart.
			if max := uint64(len(raw) + 24<<20); alloc > max {
				t.Errorf("reading %d bytes allocated %d MiB, want under %d MiB", len(raw), alloc>>20, max>>20)
			}
		})
	}
}

// Without a bound set, DefaultMaxBatchBytes applies: 64 MiB of zstd in a few
// kilobytes is not decompressed (before the patch, reading it allocated
// over a gigabyte).
func TestBillingPatchBombDefaultBound(t *testing.T) {
	raw := compressedBatch(t, compress.Zstd.Codec(), compress.Zstd, 0, DefaultMaxBatchBytes, DefaultMaxBatchBytes)
	var got []string
	alloc := allocated(func() {
		msgs, err := newMessageSetReaderTxn(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil))
		if err != nil {
			t.Fatal(err)
		}
		batch := &Batch{msgs: msgs}
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			got = append(got, omittedWhy(m))
		}
	})
	if len(got) != 2 || got[0] == "" || got[1] == "" {
		t.Errorf("read %q, want two stubs", got)
	}
	if alloc > 16<<20 {
		t.Errorf("reading a %d-byte batch allocated %d MiB", len(raw), alloc>>20)
	}
}

// A batch exactly at the bound is decoded; one byte over, it is not.
func TestBillingPatchBoundIsInclusive(t *testing.T) {
	batch := compressedBatch(t, compress.Gzip.Codec(), compress.Gzip, 0, 1000)
	inner := 0 // the batch's decompressed size
	{
		var z []byte
		r := compress.Gzip.Codec().NewReader(bytes.NewReader(batch[61:]))
		z, _ = io.ReadAll(r)
		r.Close()
		inner = len(z)
	}
	if got := readLimited(t, batch, readLimits{maxBatch: inner}); len(got) != 1 || omittedWhy(got[0]) != "" {
		t.Errorf("at the bound: %v, want the record", got)
	}
	if got := readLimited(t, batch, readLimits{maxBatch: inner - 1}); len(got) != 1 || omittedWhy(got[0]) == "" {
		t.Errorf("one byte over: %v, want a stub", got)
	}
}

// A zstd frame asking for a window over MaxZstdWindow is not decoded, even
// when its contents fit the bound: its decoder would hold the window.
func TestBillingPatchZstdWindow(t *testing.T) {
	var recs []byte
	r := []byte{0}
	r = varint(r, 0)
	r = varint(r, 0)
	r = varint(r, -1)
	r = varint(r, 3)
	r = append(r, "big"...)
	r = varint(r, 0)
	recs = append(varint(recs, int64(len(r))), r...)
	// A frame header by hand: magic, a descriptor with a window descriptor
	// and no content size, the window 2^(10+17) = 128 MiB, then the records
	// as one raw block (last block, type raw, size).
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 17 << 3}
	bh := uint32(1) | uint32(len(recs))<<3
	frame = append(frame, byte(bh), byte(bh>>8), byte(bh>>16))
	frame = append(frame, recs...)
	b := data(0, -1, "x").encode()[:61]
	binary.BigEndian.PutUint32(b[8:], uint32(49+len(frame)))
	binary.BigEndian.PutUint16(b[21:], uint16(compress.Zstd))
	raw := append(b, frame...)
	got := readLimited(t, raw, readLimits{maxBatch: 1 << 20})
	if len(got) != 1 || !strings.Contains(omittedWhy(got[0]), "zstd window") {
		t.Errorf("read %v, want a stub naming the zstd window", got)
	}
	// The same records in a frame with a small window are read.
	binary.BigEndian.PutUint16(raw[61+4:], 0x0000) // descriptor 0, window 2^10
	if got := readLimited(t, raw, readLimits{maxBatch: 1 << 20}); len(got) != 1 || string(got[0].Value) != "big" {
		t.Errorf("read %v, want the record", got)
	}
}

// v1 message sets: a compressed message over the bound is one stub at its
// own offset; one within it is read as its messages.
func TestBillingPatchBombV1(t *testing.T) {
	inner := func(n int) []byte { // v1 messages at relative offsets 0..2, values of n zero bytes
		var b []byte
		for i := range 3 {
			var m []byte
			m = binary.BigEndian.AppendUint32(m, 0) // crc
			m = append(m, 1, 0)                     // magic 1, no compression
			m = binary.BigEndian.AppendUint64(m, 0) // timestamp
			m = binary.BigEndian.AppendUint32(m, 0xffffffff)
			m = binary.BigEndian.AppendUint32(m, uint32(n))
			m = append(m, make([]byte, n)...)
			b = binary.BigEndian.AppendUint64(b, uint64(i))
			b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
			b = append(b, m...)
		}
		return b
	}
	wrapper := func(offset int64, n int) []byte {
		var z bytes.Buffer
		w := compress.Gzip.Codec().NewWriter(&z)
		w.Write(inner(n))
		w.Close()
		var m []byte
		m = binary.BigEndian.AppendUint32(m, 0)          // crc
		m = append(m, 1, byte(compress.Gzip))            // magic 1, gzip
		m = binary.BigEndian.AppendUint64(m, 7)          // timestamp
		m = binary.BigEndian.AppendUint32(m, 0xffffffff) // no key
		m = binary.BigEndian.AppendUint32(m, uint32(z.Len()))
		m = append(m, z.Bytes()...)
		var b []byte
		b = binary.BigEndian.AppendUint64(b, uint64(offset)) // the wrapper's offset is its last message's
		b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
		return append(b, m...)
	}
	raw := append(wrapper(2, 10), wrapper(5, 4<<20)...)
	raw = append(raw, wrapper(8, 10)...)
	got := readLimited(t, raw, readLimits{maxBatch: 1 << 20})
	var offsets []int64
	for _, m := range got {
		offsets = append(offsets, m.Offset)
	}
	if fmt.Sprint(offsets) != "[0 1 2 5 6 7 8]" {
		t.Fatalf("offsets %v, want [0 1 2 5 6 7 8]", offsets)
	}
	if why := omittedWhy(got[3]); why != "gzip compressed message (v1) at offset 5: decompresses to more than 1048576 bytes" {
		t.Errorf("the stub says %q", why)
	}
}

// countingBudget is a Budget that never waits, counts what is held of each
// kind and remembers the most it held.
type countingBudget struct {
	mu                sync.Mutex
	held, peak        int64
	records, batchesH int64 // held, by kind
	batches           []int64
	negative          int // releases that gave back more of a kind than it held
}

func (b *countingBudget) take(n int64, kind *int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held += n
	*kind += n
	b.peak = max(b.peak, b.held)
}

func (b *countingBudget) give(n int64, kind *int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	if *kind -= n; *kind < 0 || n < 0 {
		b.negative++
	}
}

func (b *countingBudget) AcquireRecord(_ context.Context, n int64) error {
	b.take(n, &b.records)
	return nil
}

func (b *countingBudget) AcquireBatch(_ context.Context, n int64) error {
	b.take(n, &b.batchesH)
	b.mu.Lock()
	b.batches = append(b.batches, n)
	b.mu.Unlock()
	return nil
}

func (b *countingBudget) ReleaseRecord(n int64) { b.give(n, &b.records) }
func (b *countingBudget) ReleaseBatch(n int64)  { b.give(n, &b.batchesH) }

// The budget is charged before decoding and each message takes its
// MessageBytes with it: once every message is released, nothing is held;
// while reading, at most a batch's compressed and decompressed bytes and a
// record's bound are held besides what the caller keeps.
func TestBillingPatchBudget(t *testing.T) {
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			b := &countingBudget{}
			small := compressedBatch(t, c.codec, c.code, 1, 1000, 2000, 3000)
			raw := concat(data(0, -1, "before").encode(), small,
				compressedBatch(t, c.codec, c.code, 4, 8<<20),
				headerBatch(5, []string{"h1", "flood", "h2"}, []int{10, 20_000, MaxRecordHeaders}))
			msgs, err := newMessageSetReaderLimits(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil),
				readLimits{maxBatch: 1 << 20, budget: b})
			if err != nil {
				t.Fatal(err)
			}
			batch := &Batch{msgs: msgs}
			n := 0
			for ; ; n++ {
				before := b.held
				m, err := batch.ReadMessage()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				// What the message took with it is exactly its MessageBytes:
				// the rest of its record's bound was given back.
				// (The small compressed batch's first and last records also
				// take and release its decompressed bytes.)
				if got := b.held - before; (m.Offset < 1 || m.Offset > 3) && got != MessageBytes(m) {
					t.Errorf("offset %d: the budget grew by %d, its MessageBytes are %d", m.Offset, got, MessageBytes(m))
				}
				b.ReleaseRecord(MessageBytes(m))
			}
			if err := batch.Close(); err != nil {
				t.Fatal(err)
			}
			if n != 8 {
				t.Errorf("read %d messages, want 8", n)
			}
			if b.held != 0 || b.negative != 0 {
				t.Errorf("after releasing every message the budget holds %d (%d negative releases)", b.held, b.negative)
			}
			// The small batch: its compressed bytes, then those and its
			// decompressed bytes. The bomb: its compressed bytes only.
			if len(b.batches) != 3 || b.batches[0] != int64(len(small)-61) || b.batches[1] <= b.batches[0] {
				t.Errorf("batch charges %v, want the small batch's %d compressed bytes, then more, then the bomb's", b.batches, len(small)-61)
			}
			if b.peak > 1<<20 {
				t.Errorf("the budget held up to %d bytes", b.peak)
			}
		})
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// A batch read only in part (the Batch closed, a record cut by the fetch
// size, a record skipped because it is before the offset asked for)
// releases what it held.
func TestBillingPatchBudgetPartialRead(t *testing.T) {
	b := &countingBudget{}
	raw := concat(compressedBatch(t, compress.Zstd.Codec(), compress.Zstd, 0, 100, 200, 300), data(3, -1, "p3").encode())
	msgs, err := newMessageSetReaderLimits(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil),
		readLimits{budget: b})
	if err != nil {
		t.Fatal(err)
	}
	batch := &Batch{msgs: msgs, conn: &Conn{offset: 1}} // offset 0 is before the one asked for: skipped
	m, err := batch.ReadMessage()
	if err != nil || m.Offset != 1 {
		t.Fatalf("read offset %d, %v; want 1", m.Offset, err)
	}
	b.ReleaseRecord(MessageBytes(m))
	batch.conn = nil // Close would hand the connection its offset
	batch.Close()
	if b.held != 0 {
		t.Errorf("the budget holds %d after a partial read", b.held)
	}

	// Cut inside the compressed batch's records: the batch ends.
	b = &countingBudget{}
	cut := raw[:len(raw)-20]
	got := 0
	msgs, _ = newMessageSetReaderLimits(bufio.NewReader(bytes.NewReader(cut)), len(cut), newTxnFilter(true, nil), readLimits{budget: b})
	batch = &Batch{msgs: msgs}
	for {
		m, err := batch.ReadMessage()
		if err != nil {
			break
		}
		b.ReleaseRecord(MessageBytes(m))
		got++
	}
	batch.Close()
	if b.held != 0 || got != 3 {
		t.Errorf("cut fetch: read %d, the budget holds %d", got, b.held)
	}
}

// A record whose key, value or headers are longer than its length says is
// an error of the fetch, not a record decoded past its charge.
func TestBillingPatchRecordLongerThanItsLength(t *testing.T) {
	rec := data(0, -1, "value").encode()
	// The record's length is the first varint after the 61-byte header.
	rec[61] = byte(binary.AppendVarint(nil, 4)[0])
	rec = append(rec, make([]byte, 20)...) // bytes the record claims and the response holds
	binary.BigEndian.PutUint32(rec[8:], uint32(len(rec)-12))
	msgs, err := newMessageSetReaderLimits(bufio.NewReader(bytes.NewReader(rec)), len(rec), newTxnFilter(true, nil),
		readLimits{budget: &countingBudget{}})
	if err != nil {
		t.Fatal(err)
	}
	batch := &Batch{msgs: msgs}
	m, err := batch.ReadMessage()
	if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "longer than what is left of its length") {
		t.Errorf("read %q, %v; want an error", m.Value, err)
	}
}

// MaxRecordHeaders may be raised: billing reads a record's own 4096 headers
// plus those it adds when it routes the record.
func TestBillingPatchMaxRecordHeaders(t *testing.T) {
	raw := headerBatch(0, []string{"a", "b"}, []int{MaxRecordHeaders + 11, MaxRecordHeaders + 12})
	got := readLimited(t, raw, readLimits{maxHeaders: MaxRecordHeaders + 11})
	if len(got[0].Headers) != MaxRecordHeaders+11 || len(got[1].Headers) != 1 || got[1].Headers[0].Key != HeadersDroppedKey {
		t.Errorf("headers %d and %v", len(got[0].Headers), got[1].Headers)
	}
}

// A compressed batch whose decompressed bytes hold another compressed batch
// (after its records) is an error of the fetch: decompressing the inner one
// would wait on the budget while holding the outer one's bytes.
func TestBillingPatchNestedCompression(t *testing.T) {
	inner := compressedBatch(t, compress.Gzip.Codec(), compress.Gzip, 1, 10)
	outer := data(0, -1, "a").encode()
	recs := append(outer[61:], inner...) // the outer batch's one record, then a whole batch
	var z bytes.Buffer
	w := compress.Gzip.Codec().NewWriter(&z)
	w.Write(recs)
	w.Close()
	b := append(outer[:61:61], z.Bytes()...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint16(b[21:], uint16(compress.Gzip))
	b = append(b, data(9, -1, "next").encode()...)
	msgs, err := newMessageSetReaderLimits(bufio.NewReader(bytes.NewReader(b)), len(b), newTxnFilter(true, nil),
		readLimits{budget: &countingBudget{}})
	if err != nil {
		t.Fatal(err)
	}
	batch := &Batch{msgs: msgs}
	var got []string
	for {
		m, err := batch.ReadMessage()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Errorf("read %q then io.EOF; want an error", got)
			}
			break
		}
		got = append(got, string(m.Value))
	}
	if len(got) != 1 || got[0] != "a" {
		t.Errorf("read %q before the error, want [a]", got)
	}
}
