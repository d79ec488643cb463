package kafka

// billing patch (see PATCHES.md, billing.4): bounded decoding. A compressed
// batch is decompressed into at most a configured number of bytes, and never
// past it: a batch that would hold more is not decoded, and each of its
// offsets comes back as a stub message naming the batch. An optional Budget
// is charged with what decoding allocates before it allocates it: the
// compressed and decompressed bytes of a batch, and each record as held once
// decoded, so that one budget bounds what every reader of a process holds.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// DefaultMaxBatchBytes is how many bytes a compressed batch may hold once
// decompressed when a ReadBatchConfig or ReaderConfig sets no MaxBatchBytes.
const DefaultMaxBatchBytes = 32 << 20

// BatchOmittedKey is the key of the one header of a stub message: a message
// that stands for an offset of a compressed batch that was not decoded,
// because it would hold more than MaxBatchBytes once decompressed (or its
// decoder would need more memory than that). The stub has no key and no
// value; the header's value says which batch and why, in one line.
const BatchOmittedKey = "kafka-go.billing/batch-omitted"

// MaxZstdWindow bounds the window of a zstd frame that the reader decodes:
// the decoder keeps a window's worth of history, which the frame declares. A
// frame with a larger window (zstd levels above 19 ask for 32 MiB and more)
// is not decoded: its batch is omitted like one over MaxBatchBytes.
const MaxZstdWindow = 8 << 20

// Budget bounds the memory that reading holds, across every Conn, Batch and
// Reader given the same one. Reading charges it before it allocates: a
// compressed batch's compressed bytes, then those and its decompressed bytes
// (released once the batch's last record is decoded), and each record as it
// is held once decoded (MessageBytes). A record's charge passes with the
// message to whoever reads it, who releases it when done with the message;
// records dropped inside the package (a Reader closed or moved to another
// offset, records before the offset asked for) are released there.
//
// Acquire methods wait until the bytes may be taken, or ctx ends (then they
// return its error and take nothing). Reading waits on one acquisition at a
// time and holds no other charge while it waits, but for a decompressed batch
// whose records it decodes: a Budget must let a record through when no other
// record is held, or such batches could hold the whole budget waiting for
// each other's records. Releases say which kind of charge they give back.
type Budget interface {
	// AcquireRecord takes n bytes for one record about to be decoded (or
	// its stub).
	AcquireRecord(ctx context.Context, n int64) error
	// ReleaseRecord gives back n bytes of records' charges.
	ReleaseRecord(n int64)
	// AcquireBatch takes n bytes for a compressed batch: its compressed
	// bytes, then those and its decompressed size. The reader holds nothing
	// else of the budget when it asks.
	AcquireBatch(ctx context.Context, n int64) error
	// ReleaseBatch gives back n bytes of a batch's charges.
	ReleaseBatch(n int64)
}

// MessageBytes is what a message read by ReadMessage or FetchMessage holds
// in memory as a Budget counts it: its key and value, and per header the
// Header itself plus its key's and value's allocations (16-byte granules, as
// Go's small size classes round).
func MessageBytes(m Message) int64 { return recordBytes(len(m.Key), len(m.Value), m.Headers) }

func recordBytes(key, value int, headers []Header) int64 {
	n := int64(key+value) + int64(len(headers))*headerBytes
	for _, h := range headers {
		n += allocBytes(len(h.Key)) + allocBytes(len(h.Value))
	}
	return n
}

const headerBytes = int64(unsafe.Sizeof(Header{}))

func allocBytes(n int) int64 {
	if n <= 0 {
		return 0
	}
	return int64(n+15) &^ 15
}

// recordBound is the most a record of length bytes on the wire can hold
// once decoded (recordBytes), with at most maxHeaders headers decoded: its
// key, value and header bytes fit in length (readMessageV2 checks it), each
// header costs a Header and two granules' rounding more, and a record over
// maxHeaders gets one header of its own (HeadersDroppedKey).
func recordBound(length int64, maxHeaders int) int64 {
	h := min(length/2+1, int64(maxHeaders)+1)
	return length + h*(headerBytes+2*15) + headerBytes + 64
}

// readLimits is what a messageSetReader may decode, and the budget it
// charges.
type readLimits struct {
	maxBatch   int // 0: DefaultMaxBatchBytes
	maxHeaders int // 0: MaxRecordHeaders
	budget     Budget
	// ctx ends the budget's waits (a Reader's run); Background when nil.
	ctx context.Context
	// waited is called after a wait on the budget: the Reader moves its
	// connection's read deadline, which the wait may have used up.
	waited func()
}

func (l readLimits) batchLimit() int {
	if l.maxBatch > 0 {
		return l.maxBatch
	}
	return DefaultMaxBatchBytes
}

func (l readLimits) headerLimit() int {
	if l.maxHeaders > 0 {
		return l.maxHeaders
	}
	return MaxRecordHeaders
}

func (l readLimits) context() context.Context {
	if l.ctx != nil {
		return l.ctx
	}
	return context.Background()
}

func (l readLimits) afterWait() {
	if l.waited != nil {
		l.waited()
	}
}

// acquireRecord charges n bytes for a record about to be decoded.
func (r *messageSetReader) acquireRecord(n int64) error {
	if r.limits.budget == nil {
		return nil
	}
	if err := r.limits.budget.AcquireRecord(r.limits.context(), n); err != nil {
		return fmt.Errorf("kafka: waiting for memory to decode a record: %w", err)
	}
	r.limits.afterWait()
	return nil
}

// release gives back n bytes of records' charges.
func (r *messageSetReader) release(n int64) {
	if r.limits.budget != nil && n > 0 {
		r.limits.budget.ReleaseRecord(n)
	}
}

// releaseBatch gives back n bytes of a batch's charges.
func (r *messageSetReader) releaseBatch(n int64) {
	if r.limits.budget != nil && n > 0 {
		r.limits.budget.ReleaseBatch(n)
	}
}

// decompressMu serializes the decompression of batches read with a budget:
// one batch's compressed bytes and its codec's state at a time, and at most
// one batch waiting to swap its compressed bytes' charge for the batch's
// (decompress).
var decompressMu sync.Mutex

// decompress reads the n compressed bytes of a batch (sz left in the
// response) from br and returns them decompressed, charged to the budget
// (the caller releases len(data) once the batch is read); or, when they
// would hold more than the limit once decompressed, why not (omitted), with
// the batch read past and nothing held. remain is sz less what was read.
//
// It decompresses twice: once counting the bytes, to know whether they fit
// and how many to charge before allocating them, then into exactly that. A
// batch over the limit costs its compressed bytes and the codec's state,
// never its output.
func (r *messageSetReader) decompress(br io.Reader, sz, n int, codec CompressionCodec) (data []byte, omitted string, remain int, err error) {
	remain = sz
	if n > sz {
		return nil, "", remain, errShortRead
	}
	b := r.limits.budget
	if b != nil {
		decompressMu.Lock()
		defer decompressMu.Unlock()
		if err = b.AcquireBatch(r.limits.context(), int64(n)); err != nil {
			return nil, "", remain, fmt.Errorf("kafka: waiting for memory to decompress a batch: %w", err)
		}
		r.limits.afterWait()
	}
	held := int64(n)
	defer func() { r.releaseBatch(held) }()

	comp := make([]byte, n)
	read, err := io.ReadFull(br, comp)
	remain -= read
	if err != nil {
		return nil, "", remain, err
	}
	limit := r.limits.batchLimit()
	size, omitted, err := decompressedSize(codec, comp, limit)
	if err != nil || omitted != "" {
		return nil, omitted, remain, err
	}
	if b != nil {
		// The compressed bytes' charge becomes the batch's: they are
		// held until the second pass, and decompressMu lets one batch at
		// a time wait here with them uncharged.
		b.ReleaseBatch(held)
		held = 0
		if err = b.AcquireBatch(r.limits.context(), int64(n+size)); err != nil {
			return nil, "", remain, fmt.Errorf("kafka: waiting for memory to decompress a batch: %w", err)
		}
		r.limits.afterWait()
		held = int64(n + size)
	}
	data = make([]byte, size)
	if err = expand(codec, comp, data); err != nil {
		return nil, "", remain, err
	}
	held -= int64(size) // kept with the data, for the caller to release
	return data, "", remain, nil
}

// decompressedSize is how many bytes comp holds once decompressed, or why it
// is not decoded: more than limit, or a decoder that would need more memory.
func decompressedSize(codec CompressionCodec, comp []byte, limit int) (int, string, error) {
	if codec.Code() == snappyCode {
		size := 0
		err := snappyBlocks(comp, func(block []byte) error {
			n, err := snappy.DecodedLen(block)
			if err != nil {
				return err
			}
			size += n
			if size > limit {
				return errOverLimit
			}
			return nil
		})
		if errors.Is(err, errOverLimit) {
			return 0, overLimit(limit), nil
		}
		return size, "", err
	}
	rc, done := decompressor(codec, comp)
	defer done()
	n, err := io.Copy(io.Discard, io.LimitReader(rc, int64(limit)+1))
	switch {
	case errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return 0, fmt.Sprintf("its zstd window is over the %d bytes the reader decodes", MaxZstdWindow), nil
	case err != nil:
		return 0, "", err
	case n > int64(limit):
		return 0, overLimit(limit), nil
	}
	return int(n), "", nil
}

var errOverLimit = errors.New("over the limit")

func overLimit(limit int) string {
	return fmt.Sprintf("decompresses to more than %d bytes", limit)
}

// expand decompresses comp into data, which decompressedSize sized.
func expand(codec CompressionCodec, comp, data []byte) error {
	if codec.Code() == snappyCode {
		pos := 0
		return snappyBlocks(comp, func(block []byte) error {
			n, err := snappy.DecodedLen(block)
			if err != nil {
				return err
			}
			if n > len(data)-pos {
				return errors.New("kafka: snappy batch decodes to more than it did a moment ago")
			}
			out, err := snappy.Decode(data[pos:pos+n], block)
			if err != nil {
				return err
			}
			if len(out) != n || (n > 0 && &out[0] != &data[pos]) {
				return errors.New("kafka: snappy block decoded to another length than it declares")
			}
			pos += n
			return nil
		})
	}
	rc, done := decompressor(codec, comp)
	defer done()
	if _, err := io.ReadFull(rc, data); err != nil {
		return err
	}
	var one [1]byte
	if n, err := rc.Read(one[:]); n != 0 || (err != nil && !errors.Is(err, io.EOF)) {
		return fmt.Errorf("kafka: %s batch decompresses to more than it did a moment ago (%w)", codec.Name(), err)
	}
	return nil
}

const (
	snappyCode = 2
	zstdCode   = 4
)

// decompressor reads comp decompressed. zstd gets a decoder of its own,
// with a bounded window (MaxZstdWindow): the codec's decoders accept frames
// that ask for a window of up to 512 MiB.
func decompressor(codec CompressionCodec, comp []byte) (io.Reader, func()) {
	if codec.Code() == zstdCode {
		dec, err := boundedZstd()
		if err != nil {
			return errReader{err}, func() {}
		}
		if err := dec.Reset(bytes.NewReader(comp)); err != nil {
			zstdDecoders.Put(dec)
			return errReader{err}, func() {}
		}
		return dec, func() {
			_ = dec.Reset(nil)
			zstdDecoders.Put(dec)
		}
	}
	rc := codec.NewReader(bytes.NewReader(comp))
	return rc, func() { rc.Close() }
}

var zstdDecoders sync.Pool // *zstd.Decoder with a bounded window

func boundedZstd() (*zstd.Decoder, error) {
	if d, ok := zstdDecoders.Get().(*zstd.Decoder); ok {
		return d, nil
	}
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(MaxZstdWindow))
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// xerialMagic starts a snappy stream in the xerial framing (snappy-java's),
// which compress/snappy reads: a 16-byte header, then blocks each after its
// 4-byte big-endian length. Any other stream is one raw snappy block.
var xerialMagic = []byte{130, 83, 78, 65, 80, 80, 89, 0}

// snappyBlocks calls f with each snappy block of comp, framed as
// compress/snappy's reader frames them.
func snappyBlocks(comp []byte, f func([]byte) error) error {
	if len(comp) < 16 || !bytes.Equal(comp[:8], xerialMagic) {
		if len(comp) == 0 {
			return nil
		}
		return f(comp)
	}
	for rest := comp[16:]; len(rest) > 0; {
		if len(rest) < 4 {
			return io.ErrUnexpectedEOF
		}
		n := binary.BigEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return io.ErrUnexpectedEOF
		}
		if err := f(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

// omittedBatch is a compressed batch that was not decoded: a stub message
// for each of its offsets from next to last.
type omittedBatch struct {
	next, last int64
	timestamp  int64
	why        []byte
}

// omit starts the stubs of a batch not decoded: a v2 batch has a stub for
// each offset of its range (a compacted batch, whose records leave gaps,
// gets one for each offset), a compressed v1 message one at its own offset.
// Each says, in one line, which batch (its codec and offsets) and why.
func (r *messageSetReader) omit(codec CompressionCodec, v1 bool, first, last, timestamp int64, why string) {
	what := fmt.Sprintf("%s record batch at base offset %d (offsets %d-%d)", codec.Name(), first, first, last)
	if v1 {
		what = fmt.Sprintf("%s compressed message (v1) at offset %d", codec.Name(), first)
	}
	r.omitted = &omittedBatch{next: first, last: last, timestamp: timestamp, why: []byte(what + ": " + why)}
}

// nextOmitted returns the next stub of the omitted batch.
func (r *messageSetReader) nextOmitted() (offset int64, lastOffset int64, timestamp int64, headers []Header, err error) {
	o := r.omitted
	headers = []Header{{Key: BatchOmittedKey, Value: o.why}}
	n := recordBytes(0, 0, headers)
	if err = r.acquireRecord(n); err != nil {
		return
	}
	r.charged = n
	offset, lastOffset, timestamp = o.next, o.last, o.timestamp
	if o.next++; o.next > o.last {
		r.omitted = nil
	}
	return
}

// pop leaves a decompressed set for its parent and releases what it held.
func (r *messageSetReader) pop() {
	r.releaseBatch(r.held)
	r.held = 0
	r.readerStack = r.parent
}

// fits takes n bytes of a key, value or header from what is left of the
// record's length. A record whose parts do not fit its length is corrupt,
// unless the fetch ends first: then it is a record cut by the fetch size.
func (r *messageSetReader) fits(n int64, left *int64) error {
	if n <= 0 {
		return nil
	}
	if n > *left {
		if n > int64(r.remain) {
			return errShortRead
		}
		return fmt.Errorf("record at offset %d: a part of %d bytes is longer than what is left of its length (%d)",
			r.header.firstOffset, n, *left)
	}
	*left -= n
	return nil
}

// runFuncBounded is runFunc for a key or a value that must fit in what is
// left of its record, and returns its length (0 for null).
func (r *messageSetReader) runFuncBounded(rbFunc readBytesFunc, left *int64) (int64, error) {
	var length int64
	if err := r.readVarInt(&length); err != nil {
		return 0, err
	}
	if err := r.fits(length, left); err != nil {
		return 0, err
	}
	var err error
	r.remain, err = rbFunc(r.reader, r.remain, int(length))
	return max(length, 0), err
}

// bounded is fn for a v1 message's key or value, which must fit in what is
// left of the message.
func (r *messageSetReader) bounded(fn readBytesFunc, left *int64) readBytesFunc {
	return func(br *bufio.Reader, sz int, n int) (int, error) {
		if err := r.fits(int64(n), left); err != nil {
			return sz, err
		}
		return fn(br, sz, n)
	}
}

// releaseCharged releases what the record last returned holds, when the
// caller keeps nothing of it.
func (r *messageSetReader) releaseCharged() {
	r.release(r.charged)
	r.charged = 0
}

// release gives back the budget's bytes of a message dropped before its
// reader's caller got it.
func release(b Budget, m Message) {
	if n := MessageBytes(m); b != nil && n > 0 {
		b.ReleaseRecord(n)
	}
}
