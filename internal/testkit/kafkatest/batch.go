package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// BatchRecord is one record of a batch written by [ProduceBatch]: its key,
// headers and value, or, when Zeros is set, a value of that many zero bytes,
// which the batch's compressor reads as a stream: a record of gigabytes costs
// what it compresses to.
type BatchRecord struct {
	Key     []byte
	Value   []byte
	Zeros   int
	Headers []kafkago.Header
}

// ProduceBatch writes recs to one partition of topic as a single record
// batch (v2) compressed with codec, as a producer with compression writes
// them, and returns the batch's size on the wire once every in-sync replica
// has it. A batch of zeros that a topic's max.message.bytes accepts
// compressed may hold far more once decompressed: a compression bomb.
func ProduceBatch(t testing.TB, brokers []string, topic string, partition int, codec kafkago.Compression, recs ...BatchRecord) int {
	t.Helper()
	cl, done := newClient(brokers)
	defer done()
	// A broker decompresses a compressed batch whole to validate it: a bomb
	// of 256 MiB takes it tens of seconds on a busy 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 4*opTimeout)
	defer cancel()
	var size int
	var err error
	// A broker just started may not yet know it leads the partition: what
	// Kafka calls retriable is asked again until the deadline. The batch is
	// encoded anew each time, as a record of zeros is read once.
	poll(ctx, func() bool {
		size, err = produceBatch(ctx, cl, topic, partition, codec, recs)
		var kerr kafkago.Error
		return err == nil || !errors.As(err, &kerr) || !kerr.Temporary()
	})
	if err != nil {
		t.Fatalf("kafkatest: produce a %d-byte %s batch to %s/%d: %v", size, codec, topic, partition, err)
	}
	return size
}

func produceBatch(ctx context.Context, cl *kafkago.Client, topic string, partition int, codec kafkago.Compression, recs []BatchRecord) (int, error) {
	raw, err := EncodeBatch(codec, recs...)
	if err != nil {
		return 0, fmt.Errorf("encode: %w", err)
	}
	res, err := cl.RawProduce(ctx, &kafkago.RawProduceRequest{
		Topic: topic, Partition: partition, RequiredAcks: kafkago.RequireAll,
		RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(raw)},
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	return len(raw), err
}

// EncodeBatch is the record batch ProduceBatch writes, as bytes.
func EncodeBatch(codec kafkago.Compression, recs ...BatchRecord) ([]byte, error) {
	now := time.Now()
	prs := make([]protocol.Record, len(recs))
	for i, r := range recs {
		prs[i] = protocol.Record{Time: now, Key: protocol.NewBytes(r.Key), Headers: r.Headers}
		if r.Zeros > 0 {
			prs[i].Value = &zeros{n: r.Zeros}
		} else {
			prs[i].Value = protocol.NewBytes(r.Value)
		}
	}
	rs := &protocol.RecordSet{Version: 2, Attributes: protocol.Attributes(codec), Records: protocol.NewRecordReader(prs...)}
	var b bytes.Buffer
	if _, err := rs.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("write record set: %w", err)
	}
	return b.Bytes(), nil
}

// zeros is a record value of n zero bytes, read as a stream.
type zeros struct{ n int }

func (z *zeros) Len() int { return z.n }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	n := min(len(p), z.n)
	clear(p[:n])
	z.n -= n
	return n, nil
}

func (z *zeros) Close() error { return nil }

// WriteTo writes the zeros in chunks. Without it io.Copy hands the value to
// the compressor's ReadFrom, which lz4's writer refuses once the batch has
// been written to (its ReadFrom is for a whole stream: "unhandled state").
func (z *zeros) WriteTo(w io.Writer) (int64, error) {
	chunk := make([]byte, min(z.n, 1<<16))
	var total int64
	for z.n > 0 {
		n, err := w.Write(chunk[:min(len(chunk), z.n)])
		total += int64(n)
		z.n -= n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
