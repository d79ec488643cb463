package kafka

// billing patch tests (see PATCHES.md): record batches written by hand, as a
// broker returns them in a fetch response, read through the Batch.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
)

type testBatch struct {
	offset  int64
	pid     int64 // -1: not idempotent nor transactional
	txn     bool
	control int16 // -1: data batch; else the control type (0 abort, 1 commit)
	values  []string
}

func data(offset, pid int64, values ...string) testBatch {
	return testBatch{offset: offset, pid: pid, txn: pid >= 0, control: -1, values: values}
}

func marker(offset, pid int64, typ int16) testBatch {
	return testBatch{offset: offset, pid: pid, txn: true, control: typ, values: []string{""}}
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
	b = binary.BigEndian.AppendUint32(b, uint32(len(tb.values)-1)) // last offset delta
	b = binary.BigEndian.AppendUint64(b, 0)                        // first timestamp
	b = binary.BigEndian.AppendUint64(b, 0)                        // max timestamp
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
