package kafka

// billing patch (see PATCHES.md): hide transaction markers (control batches)
// always, and the records of aborted transactions under read_committed, as
// the Java client's CompletedFetch does.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"sort"
)

const (
	// Record batch attribute bits (magic v2).
	batchTransactional = 0x10
	batchControl       = 0x20

	// Control record types, in the control record's key (version int16, type int16).
	controlAbort = 0
)

// abortedTransaction is one entry of a fetch response partition's aborted
// transactions (fetch v4+, isolation read_committed).
type abortedTransaction struct {
	ProducerId  int64
	FirstOffset int64
}

// txnFilter decides which record batches of one fetch response are hidden
// under read_committed.
type txnFilter struct {
	aborted  []abortedTransaction // not yet reached, by FirstOffset
	open     map[int64]struct{}   // producers whose aborted transaction is being read
	disabled bool                 // read_uncommitted: only control batches are hidden
}

func newTxnFilter(readCommitted bool, aborted []abortedTransaction) *txnFilter {
	f := &txnFilter{disabled: !readCommitted, open: map[int64]struct{}{}}
	if readCommitted {
		f.aborted = append(f.aborted, aborted...)
		sort.SliceStable(f.aborted, func(i, j int) bool { return f.aborted[i].FirstOffset < f.aborted[j].FirstOffset })
	}
	return f
}

// hide reports whether a batch with this v2 header is hidden from the
// application. abortMarker tells whether a control batch is an ABORT marker.
func (f *txnFilter) hide(firstOffset int64, attributes int16, lastOffsetDelta int32, producerID int64, abortMarker bool) bool {
	control := attributes&batchControl != 0
	if f != nil && !f.disabled && producerID >= 0 {
		// Every aborted transaction that starts at or before this batch's
		// last offset is now being read for its producer...
		last := firstOffset + int64(lastOffsetDelta)
		for len(f.aborted) > 0 && f.aborted[0].FirstOffset <= last {
			f.open[f.aborted[0].ProducerId] = struct{}{}
			f.aborted = f.aborted[1:]
		}
		// ...until that producer's ABORT marker ends it.
		if control && abortMarker {
			delete(f.open, producerID)
		} else if _, ok := f.open[producerID]; ok && attributes&batchTransactional != 0 {
			return true
		}
	}
	return control
}

// controlRecordIsAbort reads the type of the control record at the start of
// b, the records of a control batch: length, attributes, timestamp delta,
// offset delta, key length (varints but attributes) then the key.
func controlRecordIsAbort(b []byte) bool {
	for i := 0; i < 5; i++ {
		if i == 1 { // attributes: int8
			if len(b) < 1 {
				return false
			}
			b = b[1:]
			continue
		}
		v, n := binary.Varint(b)
		if n <= 0 {
			return false
		}
		b = b[n:]
		if i == 4 && v < 4 {
			return false
		}
	}
	return len(b) >= 4 && int16(binary.BigEndian.Uint16(b[2:4])) == controlAbort
}

// checkV2 rejects a v2 batch header whose counts no batch has: they come
// from the wire, and hideBatches, readMessageV2 and the Batch's next offset
// rely on them.
func (h messagesHeader) checkV2() error {
	if h.length < 49 || h.v2.count < 0 || h.v2.lastOffsetDelta < 0 {
		return fmt.Errorf("record batch at offset %d: length %d, %d records, last offset delta %d",
			h.firstOffset, h.length, h.v2.count, h.v2.lastOffsetDelta)
	}
	return nil
}

// checkCount is called where a record is read next: a header read there that
// counts none (a v2 batch inside a v1 message set, or bytes after a
// compressed batch's last record read as a header) is an error, where
// markRead would panic.
func (r *messageSetReader) checkCount() error {
	if r.count <= 0 {
		return fmt.Errorf("no record to read at offset %d: its header counts %d", r.header.firstOffset, r.count)
	}
	return nil
}

// readVisibleHeader replaces readMessage's readHeader: it reads the next
// header when the current batch is spent, then skips the batches hidden from
// the application. An empty batch whose header newMessageSetReader read is
// not spent yet: readHeader would read past it unseen.
func (r *messageSetReader) readVisibleHeader() error {
	if r.parent != nil || r.header.magic != 2 || r.count != 0 || r.header.v2.count != 0 {
		if err := r.readHeader(); err != nil {
			return err
		}
	}
	return r.hideBatches()
}

// hideBatches skips the batches, starting with the one whose header was just
// read, that the filter hides, and the empty ones (log compaction leaves
// them), and reads the header of the next one. It records the offset after
// the last batch it skipped in hiddenNext, so that the Batch moves past them
// even if no record follows.
func (r *messageSetReader) hideBatches() error {
	// r.count == r.header.v2.count: no record of this batch was read yet.
	for r.header.magic == 2 && r.count == int(r.header.v2.count) && r.parent == nil {
		h := r.header.v2
		body := int(r.header.length - 49) // bytes of the records, after the header (checkV2)
		abort := false
		if h.attributes&batchControl != 0 {
			n := body
			if n > 32 {
				n = 32
			}
			if n > r.remain {
				n = r.remain
			}
			b, err := r.reader.Peek(n)
			if err != nil {
				return err
			}
			abort = controlRecordIsAbort(b)
		}
		// An empty batch has nothing to show, and no marker to take into
		// account: the aborted transactions it would start are started by
		// the next batch as well (FirstOffset <= its last offset).
		if r.count > 0 && !r.txn.hide(r.header.firstOffset, h.attributes, h.lastOffsetDelta, h.producerID, abort) {
			return nil
		}
		if body > r.remain {
			// A batch cut by the fetch size: the next fetch starts at it.
			return errShortRead
		}
		if err := r.discardN(body); err != nil {
			return err
		}
		r.hiddenNext = r.header.firstOffset + int64(h.lastOffsetDelta) + 1
		r.count = 0
		r.lengthRemain = 0
		if err := r.readHeader(); err != nil {
			return err
		}
	}
	return nil
}

// readAbortedTransactions reads a fetch response partition's aborted
// transactions (fetch v4+). Their count comes from the wire: one the bytes
// left cannot hold (16 each) is an error of this fetch, and the list grows
// as entries arrive, so that a response claiming more bytes than it sends
// allocates no more than it sends.
func readAbortedTransactions(r *bufio.Reader, remain int) ([]abortedTransaction, int, error) {
	var n int
	remain, err := readArrayLen(r, remain, &n)
	if err != nil || n == -1 {
		return nil, remain, err
	}
	if n < 0 || n > remain/16 {
		return nil, remain, fmt.Errorf("fetch response lists %d aborted transactions in %d bytes", n, remain)
	}
	var aborted []abortedTransaction
	for i := 0; i < n; i++ {
		var a abortedTransaction
		if remain, err = read(r, remain, &a); err != nil {
			return nil, remain, err
		}
		aborted = append(aborted, a)
	}
	return aborted, remain, nil
}
