package kafka

// billing patch tests (see PATCHES.md): record batches written by hand, as a
// broker returns them in a fetch response, read through the Batch.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go/compress"
)

type testBatch struct {
	offset    int64
	lastDelta int32 // last offset delta: the batch holds offset..offset+lastDelta
	pid       int64 // -1: not idempotent nor transactional
	txn       bool
	control   int16 // -1: data batch; else the control type (0 abort, 1 commit)
	values    []string
}

func data(offset, pid int64, values ...string) testBatch {
	return testBatch{offset: offset, lastDelta: int32(len(values) - 1), pid: pid, txn: pid >= 0, control: -1, values: values}
}

func marker(offset, pid int64, typ int16) testBatch {
	return testBatch{offset: offset, pid: pid, txn: true, control: typ, values: []string{""}}
}

// empty is a batch whose records compaction removed: v2 keeps the batch, its
// offsets and producer, with no record.
func empty(offset, pid int64, lastDelta int32) testBatch {
	return testBatch{offset: offset, lastDelta: lastDelta, pid: pid, txn: pid >= 0, control: -1}
}

func varint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func (tb testBatch) encode() []byte {
	var recs []byte
	for i, v := range tb.values {
		var r []byte
		r = append(r, 0)        // attributes
		r = varint(r, 0)        // timestamp delta
		r = varint(r, int64(i)) // offset delta
		if tb.control >= 0 {    // key: version 0, type
			r = varint(r, 4)
			r = binary.BigEndian.AppendUint16(r, 0)
			r = binary.BigEndian.AppendUint16(r, uint16(tb.control))
			r = varint(r, 6) // value: version 0, coordinator epoch
			r = append(r, 0, 0, 0, 0, 0, 0)
		} else {
			r = varint(r, -1) // no key
			r = varint(r, int64(len(v)))
			r = append(r, v...)
		}
		r = varint(r, 0) // no headers
		recs = varint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	var attrs int16
	if tb.txn {
		attrs |= batchTransactional
	}
	if tb.control >= 0 {
		attrs |= batchControl
	}
	var b []byte
	b = binary.BigEndian.AppendUint64(b, uint64(tb.offset))
	b = binary.BigEndian.AppendUint32(b, uint32(49+len(recs))) // length
	b = binary.BigEndian.AppendUint32(b, 0)                    // leader epoch
	b = append(b, 2)                                           // magic
	b = binary.BigEndian.AppendUint32(b, 0)                    // crc (not checked when reading)
	b = binary.BigEndian.AppendUint16(b, uint16(attrs))
	b = binary.BigEndian.AppendUint32(b, uint32(tb.lastDelta))
	b = binary.BigEndian.AppendUint64(b, 0) // first timestamp
	b = binary.BigEndian.AppendUint64(b, 0) // max timestamp
	b = binary.BigEndian.AppendUint64(b, uint64(tb.pid))
	b = binary.BigEndian.AppendUint16(b, 0)                      // producer epoch
	b = binary.BigEndian.AppendUint32(b, 0)                      // base sequence
	b = binary.BigEndian.AppendUint32(b, uint32(len(tb.values))) // count
	return append(b, recs...)
}

// readAll reads every record the batch returns, and the offset the next
// fetch would start at.
func readAll(t *testing.T, readCommitted bool, aborted []abortedTransaction, from int64, batches ...testBatch) ([]string, int64) {
	t.Helper()
	var raw []byte
	for _, b := range batches {
		raw = append(raw, b.encode()...)
	}
	return readRaw(t, readCommitted, aborted, from, raw)
}

// readRaw is readAll of record batches as bytes.
func readRaw(t *testing.T, readCommitted bool, aborted []abortedTransaction, from int64, raw []byte) ([]string, int64) {
	t.Helper()
	msgs, err := newMessageSetReaderTxn(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(readCommitted, aborted))
	if err != nil {
		t.Fatal(err)
	}
	batch := &Batch{msgs: msgs, offset: from}
	var got []string
	for {
		m, err := batch.ReadMessage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		got = append(got, string(m.Value))
	}
	if err := batch.Close(); err != nil {
		t.Fatal(err)
	}
	return got, batch.Offset()
}

// The stream of the tests: plain records; producer 7 commits a then c;
// producer 8 aborts b, interleaved with a plain record; producer 9 commits
// t1, aborts t2, commits t3 (an aborted transaction between two committed
// ones of the same producer); producer 10 aborts e at the end.
var (
	txnStream = []testBatch{
		data(0, -1, "p1"),
		data(1, 7, "a"), marker(2, 7, 1),
		data(3, 8, "b1", "b2"), data(5, -1, "p2"), marker(6, 8, 0),
		data(7, 7, "c"), marker(8, 7, 1),
		data(9, 9, "t1"), marker(10, 9, 1), data(11, 9, "t2"), marker(12, 9, 0), data(13, 9, "t3"), marker(14, 9, 1),
		data(15, 10, "e"), marker(16, 10, 0),
	}
	txnAborted = []abortedTransaction{{ProducerId: 10, FirstOffset: 15}, {ProducerId: 8, FirstOffset: 3}, {ProducerId: 9, FirstOffset: 11}}
)

func TestBillingPatchReadCommitted(t *testing.T) {
	got, next := readAll(t, true, txnAborted, 0, txnStream...)
	if want := []string{"p1", "a", "p2", "c", "t1", "t3"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
	if next != 17 {
		t.Errorf("next offset %d, want 17 (past the hidden tail)", next)
	}
}

func TestBillingPatchReadUncommittedHidesMarkersOnly(t *testing.T) {
	got, next := readAll(t, false, txnAborted, 0, txnStream...)
	if want := []string{"p1", "a", "b1", "b2", "p2", "c", "t1", "t2", "t3", "e"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
	if next != 17 {
		t.Errorf("next offset %d, want 17", next)
	}
}

// A fetch that starts inside an aborted transaction, after its first offset:
// the broker does not list it, and its ABORT marker must not fail the read.
func TestBillingPatchFetchStartsInsideAbortedTransaction(t *testing.T) {
	got, next := readAll(t, true, nil, 5, data(5, -1, "p2"), marker(6, 8, 0), data(7, 7, "c"), marker(8, 7, 1))
	if want := []string{"p2", "c"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
	if next != 9 {
		t.Errorf("next offset %d, want 9", next)
	}
}

// A response holding only hidden batches moves the next fetch past them, so
// that a reader does not fetch them again for ever.
func TestBillingPatchOnlyHiddenBatchesAdvance(t *testing.T) {
	got, next := readAll(t, true, []abortedTransaction{{ProducerId: 8, FirstOffset: 3}}, 3, data(3, 8, "b1", "b2"), marker(5, 8, 0))
	if len(got) != 0 || next != 6 {
		t.Errorf("read %q, next offset %d; want nothing, 6", got, next)
	}
}

func TestBillingPatchControlRecordIsAbort(t *testing.T) {
	recs := func(tb testBatch) []byte { return tb.encode()[61:] }
	if !controlRecordIsAbort(recs(marker(0, 1, 0))) {
		t.Error("abort marker not recognised")
	}
	if controlRecordIsAbort(recs(marker(0, 1, 1))) {
		t.Error("commit marker taken for an abort")
	}
	if controlRecordIsAbort(recs(marker(0, 1, 0))[:5]) {
		t.Error("cut control record taken for an abort")
	}
}

// Log compaction leaves empty batches (offsets and producer kept, no
// record). A marker or an aborted batch right after one is hidden all the
// same, wherever the empty batch stands in the fetch.
func TestBillingPatchEmptyBatches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		aborted []abortedTransaction
		from    int64
		batches []testBatch
		want    []string
		next    int64
	}{
		{
			name:    "marker after an empty batch",
			batches: []testBatch{data(0, -1, "p1"), empty(1, 7, 0), marker(2, 7, 1), data(3, -1, "p2")},
			want:    []string{"p1", "p2"}, next: 4,
		},
		{
			name:    "aborted batch after an empty batch",
			aborted: []abortedTransaction{{ProducerId: 8, FirstOffset: 2}},
			batches: []testBatch{data(0, -1, "p1"), empty(1, -1, 0), data(2, 8, "b1", "b2"), marker(4, 8, 0), data(5, -1, "p2")},
			want:    []string{"p1", "p2"}, next: 6,
		},
		{
			name:    "empty batches after a hidden one",
			aborted: []abortedTransaction{{ProducerId: 8, FirstOffset: 1}},
			batches: []testBatch{data(0, -1, "p1"), data(1, 8, "b"), empty(2, -1, 1), empty(4, 9, 0), marker(5, 8, 0), data(6, -1, "p2")},
			want:    []string{"p1", "p2"}, next: 7,
		},
		{
			name:    "empty first batch, then a marker",
			from:    3,
			batches: []testBatch{empty(3, 7, 1), marker(5, 7, 1), data(6, -1, "p1")},
			want:    []string{"p1"}, next: 7,
		},
		{
			name:    "empty first batch, then an aborted one",
			aborted: []abortedTransaction{{ProducerId: 8, FirstOffset: 4}},
			from:    3,
			batches: []testBatch{empty(3, -1, 0), data(4, 8, "b"), marker(5, 8, 0), data(6, -1, "p1")},
			want:    []string{"p1"}, next: 7,
		},
		{
			// The next fetch starts after the empty batch, as in the Java
			// client, instead of fetching it again for ever.
			name:    "only an empty batch",
			from:    3,
			batches: []testBatch{empty(3, -1, 4)},
			next:    8,
		},
		{
			name:    "records, then an empty batch at the end",
			batches: []testBatch{data(0, -1, "p1"), empty(1, -1, 2)},
			want:    []string{"p1"}, next: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, readCommitted := range []bool{true, false} {
				aborted := tc.aborted
				if !readCommitted {
					aborted = nil // read_uncommitted fetches list none
				}
				got, next := readAll(t, readCommitted, aborted, tc.from, tc.batches...)
				want := tc.want
				if !readCommitted && tc.aborted != nil {
					continue // aborted records are shown then: covered above
				}
				if !slices.Equal(got, want) || next != tc.next {
					t.Errorf("read_committed %v: read %q, next offset %d; want %q, %d", readCommitted, got, next, want, tc.next)
				}
			}
		})
	}
}

// fetchResponse is a fetch response (v10 or v5) after its size and
// correlation id, with one partition: count and entries of the aborted
// transactions (count -1: none listed), then the record batches.
func fetchResponse(v10 bool, count int32, aborted []abortedTransaction, batches []byte) []byte {
	be := binary.BigEndian
	var b []byte
	b = be.AppendUint32(b, 0) // throttle
	if v10 {
		b = be.AppendUint16(b, 0) // error code
		b = be.AppendUint32(b, 0) // session id
	}
	b = be.AppendUint32(b, 1)     // topics
	b = be.AppendUint16(b, 1)     // topic name length
	b = append(b, 't')            // topic name
	b = be.AppendUint32(b, 1)     // partitions
	b = be.AppendUint32(b, 0)     // partition
	b = be.AppendUint16(b, 0)     // error code
	b = be.AppendUint64(b, 1<<40) // high watermark
	b = be.AppendUint64(b, 1<<40) // last stable offset
	b = be.AppendUint64(b, 0)     // log start offset
	b = be.AppendUint32(b, uint32(count))
	for _, a := range aborted {
		b = be.AppendUint64(b, uint64(a.ProducerId))
		b = be.AppendUint64(b, uint64(a.FirstOffset))
	}
	b = be.AppendUint32(b, uint32(len(batches)))
	return append(b, batches...)
}

func readFetchHeader(v10 bool, r *bufio.Reader, size int) (remain int, aborted []abortedTransaction, err error) {
	if v10 {
		_, _, remain, aborted, err = readFetchResponseHeaderV10(r, size)
	} else {
		_, _, remain, aborted, err = readFetchResponseHeaderV5(r, size)
	}
	return
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The aborted transactions' count comes from the broker: a negative or
// absurd one is an error of that fetch, neither a panic nor an allocation
// of what the response does not hold, even when the response's size (also
// from the wire) claims more bytes than arrive.
func TestBillingPatchAbortedTransactionsCount(t *testing.T) {
	two := []abortedTransaction{{ProducerId: 1, FirstOffset: 2}, {ProducerId: 3, FirstOffset: 4}}
	for _, tc := range []struct {
		name    string
		count   int32
		entries []abortedTransaction
		claimed int // the response's size, when it claims more than arrives
		wantErr bool
	}{
		{name: "none listed", count: -1},
		{name: "empty list", count: 0},
		{name: "two", count: 2, entries: two},
		{name: "minus two", count: -2, wantErr: true},
		{name: "minimum int32", count: -1 << 31, wantErr: true},
		{name: "more than the bytes hold", count: 1000, entries: two, wantErr: true},
		{name: "2^26 in a size that holds them", count: 1 << 26, entries: two, claimed: 1<<31 - 1, wantErr: true},
		{name: "maximum int32", count: 1<<31 - 1, entries: two, claimed: 1<<31 - 1, wantErr: true},
	} {
		for _, v10 := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/v10=%v", tc.name, v10), func(t *testing.T) {
				resp := fetchResponse(v10, tc.count, tc.entries, data(0, -1, "p1").encode())
				size := len(resp)
				if tc.claimed > 0 {
					size = tc.claimed
				}
				var aborted []abortedTransaction
				var err error
				alloc := allocated(func() {
					_, aborted, err = readFetchHeader(v10, bufio.NewReader(bytes.NewReader(resp)), size)
				})
				if tc.wantErr {
					if err == nil {
						t.Errorf("no error, read %d aborted transactions", len(aborted))
					}
				} else if err != nil || !slices.Equal(aborted, tc.entries) {
					t.Errorf("read %v, %v; want %v", aborted, err, tc.entries)
				}
				if alloc > 1<<20 {
					t.Errorf("allocated %d bytes for a %d-byte response", alloc, len(resp))
				}
			})
		}
	}
}

// Batch headers with counts no batch has are errors, not batches to hide.
func TestBillingPatchBadBatchHeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		patch func(b []byte)
	}{
		{"negative record count", func(b []byte) { binary.BigEndian.PutUint32(b[57:], uint32(0xffffffff)) }},
		{"negative last offset delta", func(b []byte) { binary.BigEndian.PutUint32(b[23:], uint32(0xfffffffe)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := append(data(0, -1, "p1").encode(), marker(1, 7, 1).encode()...)
			second := raw[len(data(0, -1, "p1").encode()):]
			tc.patch(second)
			msgs, err := newMessageSetReaderTxn(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil))
			if err != nil {
				t.Fatal(err)
			}
			batch := &Batch{msgs: msgs}
			if m, err := batch.ReadMessage(); err != nil || string(m.Value) != "p1" {
				t.Fatalf("first record %q, %v", m.Value, err)
			}
			m, err := batch.ReadMessage()
			if err == nil || errors.Is(err, io.EOF) {
				t.Errorf("read %q, %v after a bad batch header; want an error", m.Value, err)
			}
		})
	}
}

// A compressed v1 message whose value length is negative: an error, not a
// bytes.Buffer.Grow panic.
func TestBillingPatchCompressedV1WithoutValue(t *testing.T) {
	be := binary.BigEndian
	var m []byte
	m = be.AppendUint32(m, 0)          // crc
	m = append(m, 1, 1)                // magic 1, attributes: gzip
	m = be.AppendUint64(m, 0)          // timestamp
	m = be.AppendUint32(m, 0xffffffff) // key: null
	m = be.AppendUint32(m, 0xfffffffe) // value: length -2
	var raw []byte
	raw = be.AppendUint64(raw, 0) // offset
	raw = be.AppendUint32(raw, uint32(len(m)))
	raw = append(raw, m...)
	msgs, err := newMessageSetReaderTxn(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil))
	if err != nil {
		t.Fatal(err)
	}
	batch := &Batch{msgs: msgs}
	if m, err := batch.ReadMessage(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("read %q, %v; want an error", m.Value, err)
	}
}

// gzipped is tb with its records compressed (gzip), as a producer with
// compression writes them.
func gzipped(t testing.TB, tb testBatch) []byte {
	b := tb.encode()
	var z bytes.Buffer
	w := compress.Gzip.Codec().NewWriter(&z)
	if _, err := w.Write(b[61:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b = append(b[:61:61], z.Bytes()...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))                                      // length
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|uint16(compress.Gzip)) // attributes
	return b
}

// FuzzBillingPatchRead reads arbitrary fetch responses (v10 or v5, after the
// response's size and correlation id) as Conn.ReadBatchWith and Batch do:
// whatever the bytes, reading ends in io.EOF or an error, never in a panic
// or a loop. The response's size is that of the input: a size claiming more
// bytes than arrive is TestBillingPatchAbortedTransactionsCount's case (and
// PATCHES.md's "Not changed").
//
// billing.4: it reads with a bound on decompressed batches (64 KiB) and a
// budget, and releases each message's MessageBytes as a caller does: once
// the Batch is closed the budget holds nothing, whatever was read, stubbed,
// skipped or cut, and no release gives back more than was taken.
func FuzzBillingPatchRead(f *testing.F) {
	var stream []byte
	for _, b := range txnStream {
		stream = append(stream, b.encode()...)
	}
	withEmpty := slices.Concat(data(0, -1, "p1").encode(), empty(1, 7, 0).encode(), empty(2, -1, 1).encode(),
		marker(4, 7, 1).encode(), data(5, 8, "b").encode(), marker(6, 8, 0).encode())
	compressed := slices.Concat(gzipped(f, data(0, 7, "a1", "a2", "a3")), marker(3, 7, 0).encode(), gzipped(f, data(4, -1, "p1", "p2")))
	var bombs []byte // over the fuzz's bound, in every codec, between plain records
	for i, c := range codecs {
		bombs = append(bombs, data(int64(3*i), -1, "p").encode()...)
		bombs = append(bombs, compressedBatch(f, c.codec, c.code, int64(3*i+1), 1<<17, 10)...)
	}
	for _, v10 := range []bool{true, false} {
		f.Add(fetchResponse(v10, -1, nil, bombs), v10, true)
		f.Add(fetchResponse(v10, int32(len(txnAborted)), txnAborted, stream), v10, true)
		f.Add(fetchResponse(v10, -1, nil, stream), v10, false)
		f.Add(fetchResponse(v10, 1, []abortedTransaction{{ProducerId: 8, FirstOffset: 5}}, withEmpty), v10, true)
		f.Add(fetchResponse(v10, 1, []abortedTransaction{{ProducerId: 7, FirstOffset: 0}}, compressed), v10, true)
	}
	f.Fuzz(func(t *testing.T, resp []byte, v10, readCommitted bool) {
		r := bufio.NewReader(bytes.NewReader(resp))
		remain, aborted, err := readFetchHeader(v10, r, len(resp))
		if err != nil {
			return
		}
		budget := &countingBudget{}
		msgs, err := newMessageSetReaderLimits(r, remain, newTxnFilter(readCommitted, aborted),
			readLimits{maxBatch: 1 << 16, budget: budget})
		batch := &Batch{msgs: msgs, err: dontExpectEOF(err)}
		// Decoded records: far more than a fuzzed input decompresses to
		// under the bound. Stubs: an omitted batch stands for each offset
		// of the range its header declares, up to 2^31 of them (a broker
		// holds that many records behind such a range; a fuzzed header
		// declares it in 61 bytes); past this many the rest are the same
		// loop over that range, and reading them only takes time.
		const maxReads, maxStubs = 1 << 20, 1 << 16
		var decoded, stubs int
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			budget.ReleaseRecord(MessageBytes(m))
			if len(m.Headers) == 1 && m.Headers[0].Key == BatchOmittedKey && m.Key == nil && m.Value == nil {
				if stubs++; stubs == maxStubs {
					break
				}
				continue
			}
			if decoded++; decoded == maxReads {
				t.Fatalf("no end after %d records from %d bytes", decoded, len(resp))
			}
		}
		batch.Close()
		if budget.held != 0 || budget.negative != 0 {
			t.Fatalf("after the Batch closed the budget holds %d bytes (%d negative releases)", budget.held, budget.negative)
		}
	})
}

// A fetch cut by its size inside a record's headers ends the Batch as any
// cut record does (io.EOF, the next fetch starting at that record): the
// header count is bounded by the bytes left, and a count they cannot hold
// is a cut, not an error that closes the connection.
func TestBillingPatchRecordCutInHeaders(t *testing.T) {
	cut := data(1, -1, "p2").encode()
	cut[len(cut)-1] = 2 // the record's header count: varint 1, its header not in the fetch
	raw := append(data(0, -1, "p1").encode(), cut...)
	got, next := readRaw(t, true, nil, 0, raw)
	if !slices.Equal(got, []string{"p1"}) || next != 1 {
		t.Errorf("read %q, next offset %d; want [p1], 1", got, next)
	}
}

// headerBatch is one batch of records, record i with values[i] and
// headers[i] headers of a one-byte key and an empty value (billing patch:
// MaxRecordHeaders).
func headerBatch(offset int64, values []string, headers []int) []byte {
	var recs []byte
	for i, v := range values {
		var r []byte
		r = append(r, 0)        // attributes
		r = varint(r, 0)        // timestamp delta
		r = varint(r, int64(i)) // offset delta
		r = varint(r, -1)       // no key
		r = varint(r, int64(len(v)))
		r = append(r, v...)
		r = varint(r, int64(headers[i]))
		for range headers[i] {
			r = varint(r, 1)
			r = append(r, 'h')
			r = varint(r, 0)
		}
		recs = varint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	b := data(offset, -1, values...).encode()[:61] // the header of a plain batch of as many records
	binary.BigEndian.PutUint32(b[8:12], uint32(49+len(recs)))
	return append(b, recs...)
}

// TestBillingPatchHeaderFlood: a record with more than MaxRecordHeaders
// headers comes back with its value and one header, HeadersDroppedKey with
// the count, its headers skipped undecoded (a flood of empty headers costs
// the reader no memory); its neighbours keep theirs.
func TestBillingPatchHeaderFlood(t *testing.T) {
	const flood = 200_000
	raw := headerBatch(0, []string{"before", "flooded", "after"}, []int{3, flood, MaxRecordHeaders})
	var msgs []Message
	alloc := allocated(func() {
		r, err := newMessageSetReaderTxn(bufio.NewReader(bytes.NewReader(raw)), len(raw), newTxnFilter(true, nil))
		if err != nil {
			t.Fatal(err)
		}
		batch := &Batch{msgs: r}
		for {
			m, err := batch.ReadMessage()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			msgs = append(msgs, m)
		}
	})
	if len(msgs) != 3 {
		t.Fatalf("read %d records, want 3", len(msgs))
	}
	if string(msgs[1].Value) != "flooded" || len(msgs[1].Headers) != 1 || msgs[1].Headers[0].Key != HeadersDroppedKey ||
		string(msgs[1].Headers[0].Value) != fmt.Sprint(flood) {
		t.Errorf("flooded record: value %q, headers %d (first %+v); want its value and one %s header of %d",
			msgs[1].Value, len(msgs[1].Headers), msgs[1].Headers[:min(1, len(msgs[1].Headers))], HeadersDroppedKey, flood)
	}
	if len(msgs[0].Headers) != 3 || len(msgs[2].Headers) != MaxRecordHeaders || msgs[2].Headers[0].Key != "h" {
		t.Errorf("neighbours' headers: %d and %d, want 3 and %d decoded", len(msgs[0].Headers), len(msgs[2].Headers), MaxRecordHeaders)
	}
	// Decoded, the flood's headers would take flood × (Header, key) ≈ 8 MB.
	if limit := uint64(len(raw) + 2<<20); alloc > limit {
		t.Errorf("allocated %d bytes reading %d, want under %d: the flood's headers were decoded", alloc, len(raw), limit)
	}
}
