package kafka

import (
	"context"
	"errors"
	"time"
)

// Record is one Kafka record as the consumer, the handler and the router
// see it: fetched from a partition, or built to be routed. Only the source
// (source.go) and the writer (writer.go) know the client library's types;
// everything else works on these.
type Record struct {
	Topic     string
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	// Time is the record's timestamp; zero on a record to be written lets
	// the writer stamp it.
	Time time.Time
	// HeadersDropped, when not 0, is how many headers of its own the
	// record carried, more than MaxRecordHeaders (a header flood, see
	// bounds.go), and Headers is empty. Such a record is not handled: it
	// goes to the DLQ as a stub that names where the original is.
	HeadersDropped int64
	// BatchOmitted, when set, says that the record stands for an offset of
	// a compressed batch the client did not decode, because it holds more
	// than BILLING_KAFKA_MAX_BATCH_BYTES once decompressed: which batch
	// (codec, base offset, offsets) and why. It has no key, value or
	// headers. Such a record is not handled: it goes to the DLQ as a stub
	// whose size is unknown (ValueOmittedUnknown).
	BatchOmitted string

	// held is the share of the process's memory budget the record holds
	// from its decoding until its outcome is final (MemoryBudget).
	held charge
	// dated, while a consumer handles the record, is where its handler
	// notes when the event happened (noteEventTime), so that the delay SLI
	// need not decode the value again (eventTime).
	dated *time.Time
}

// noteEventTime records t, when the event the record carries happened as
// its handler decoded it, for the consumer's delay SLI.
func (r Record) noteEventTime(t time.Time) {
	if r.dated != nil {
		*r.dated = t
	}
}

// charge is bytes of a memory budget that something holds.
type charge struct {
	b interface{ ReleaseRecord(n int64) }
	n int64
}

// release gives the bytes back; a zero charge gives nothing.
func (c charge) release() {
	if c.b != nil && c.n > 0 {
		c.b.ReleaseRecord(c.n)
	}
}

// Header is one record header. It has the shape of kafka-go's header, so
// that the source and the writer hand a record's headers across without
// copying them (see source.go).
type Header struct {
	Key   string
	Value []byte
}

// Generation is one generation of the consumer group as this member sees
// it: the partitions it assigned to the member, with their committed
// offsets, and the only way to commit offsets for them.
type Generation interface {
	// ID is the generation's number, for logs.
	ID() int32
	// Assignments are the partitions this member holds in the generation.
	Assignments() []Assignment
	// Start runs fn in the generation: fn's ctx ends when the generation
	// does, and the group joins the next generation only once fn has
	// returned, so fn may still commit through the generation after its
	// ctx ended.
	Start(fn func(ctx context.Context))
	// CommitOffsets commits, per topic and partition, the next offset to
	// read.
	CommitOffsets(offsets map[string]map[int]int64) error
}

// Assignment is one partition a generation assigned to this member, and
// where reading starts: the group's committed offset, or a negative value
// (the group's start offset, first or last) when it never committed one.
type Assignment struct {
	Topic     string
	Partition int
	Offset    int64
}

// ErrSourceClosed is what a Source's Next returns (errors.Is) once the
// source is closed: the group is gone for good.
var ErrSourceClosed = errors.New("source closed")

// ErrRefused is what a Writer returns (errors.Is) for a write the broker
// refused for good: a retry of the same record would meet the same answer
// (too large for the topic, against its rules, not authorised).
var ErrRefused = errors.New("write refused for good")

// markedError is a client error that also is one of the package's errors
// (ErrSourceClosed, ErrRefused), with the client's text unchanged.
type markedError struct {
	err  error
	mark error
}

func (e markedError) Error() string        { return e.err.Error() }
func (e markedError) Unwrap() error        { return e.err }
func (e markedError) Is(target error) bool { return target == e.mark }
