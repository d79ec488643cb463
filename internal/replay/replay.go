// Package replay copies dead-lettered records back to the main topic: value,
// key and original headers unchanged, the routing headers dropped, so the
// record comes back with its original event_id and dedup (or the invoice
// guard) makes a second replay harmless.
package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
)

// Options filters what is replayed.
type Options struct {
	Since  time.Time // keep records whose x-failed-at is at or after Since (zero: all)
	Limit  int       // stop after Limit records (0: no limit)
	DryRun bool      // count, write nothing
	// Tiers are the retry tier topics which, besides the main topic, a
	// stub's x-original-topic may name (the service's configured tiers).
	Tiers []string
}

// Result is what a replay did.
type Result struct {
	Replayed int // records written (or, dry, that would be)
	Skipped  int // stubs whose original could not be replayed, each logged
}

// Run is Replay for callers that need only how many records were replayed.
func Run(ctx context.Context, kc *kafkaclient.Cluster, dlq, topic string, o Options, log *slog.Logger) (int, error) {
	r, err := Replay(ctx, kc, dlq, topic, o, log)
	return r.Replayed, err
}

// Replay reads dlq from the start of every partition up to the high-water
// marks seen when it starts (no stored position: records added meanwhile
// wait for the next replay), and copies the selected records to topic.
// Writes are acknowledged by all in-sync replicas before Replay returns.
//
// Nothing a DLQ record says is trusted: a stub (x-value-omitted) is
// replayed from its original only when x-original-topic is topic or one of
// o.Tiers, x-original-partition a partition of it and x-original-offset an
// offset that partition still holds; any other stub, and one whose
// original is not the same record, is skipped, logged and counted in
// Result.Skipped, and the replay goes on.
func Replay(ctx context.Context, kc *kafkaclient.Cluster, dlq, topic string, o Options, log *slog.Logger) (Result, error) {
	rp := &replayer{kc: kc, dlq: dlq, topic: topic, o: o, log: log,
		origins: map[string]bool{topic: true}, partitions: map[string]int{}}
	for _, t := range o.Tiers {
		rp.origins[t] = true
	}
	err := rp.run(ctx)
	return rp.res, err
}

// replayer is one replay.
type replayer struct {
	kc         *kafkaclient.Cluster
	dlq, topic string
	o          Options
	log        *slog.Logger
	origins    map[string]bool // topics a stub's original may be read from
	partitions map[string]int  // partition counts of origins, looked up once each
	res        Result
}

func (rp *replayer) run(ctx context.Context) error {
	kc, dlq, o, log := rp.kc, rp.dlq, rp.o, rp.log
	cl, done := kc.Client()
	defer done()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{dlq}})
	if err != nil {
		return fmt.Errorf("dlq metadata: %w", err)
	}
	var reqs []kafkago.OffsetRequest
	for _, t := range md.Topics {
		if t.Error != nil {
			return fmt.Errorf("dlq topic %s: %w", dlq, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafkago.FirstOffsetOf(p.ID), kafkago.LastOffsetOf(p.ID))
		}
	}
	// read_committed: the end is the last stable offset, so a transaction
	// still open on the DLQ is left for the next replay instead of waited for.
	lo, err := cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{dlq: reqs},
		IsolationLevel: kafkago.ReadCommitted})
	if err != nil {
		return fmt.Errorf("dlq offsets: %w", err)
	}
	parts := lo.Topics[dlq]
	slices.SortFunc(parts, func(a, b kafkago.PartitionOffsets) int { return a.Partition - b.Partition })

	var w *kafkaclient.Writer
	if !o.DryRun {
		var closeW func() error
		w, closeW = kc.NewWriter()
		defer func() { _ = closeW() }()
	}
	for _, p := range parts {
		if p.Error != nil {
			return fmt.Errorf("dlq partition %d: %w", p.Partition, p.Error)
		}
		if p.LastOffset <= p.FirstOffset {
			continue
		}
		if err := rp.replayPartition(ctx, w, p); err != nil {
			return err
		}
		if o.Limit > 0 && rp.res.Replayed >= o.Limit {
			break
		}
	}
	log.Info("dlq replay finished", slog.Int("records", rp.res.Replayed), slog.Int("skipped", rp.res.Skipped),
		slog.Bool("dry_run", o.DryRun))
	return nil
}

// Replay holds at most about replayBatchBytes of records waiting for their
// write, plus one fetch of up to fetchMaxBytes (the broker still returns a
// larger record whole). A batch is acknowledged before more records are
// taken, so the records of a partition reach the main topic in offset order.
const (
	fetchMaxBytes    = 1 << 20
	queueCapacity    = 2
	replayBatchBytes = 1_000_000
	replayBatchLen   = 100
)

// newPartitionReader reads one partition of topic from an offset the
// caller sets; readOriginal uses it for the one record a stub points to,
// after checking that the partition exists (kafka-go's NewReader panics on
// a negative one). An offset outside the partition fails at once rather
// than waiting for records to reach it.
func newPartitionReader(kc *kafkaclient.Cluster, topic string, partition int) *kafkago.Reader {
	return kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:               kc.Brokers(),
		Topic:                 topic,
		Partition:             partition,
		Dialer:                kc.Dialer(),
		MaxBytes:              fetchMaxBytes,
		QueueCapacity:         queueCapacity,
		MaxWait:               200 * time.Millisecond,
		IsolationLevel:        kafkago.ReadCommitted,
		OffsetOutOfRangeError: true,
	})
}

// replayPartition copies the selected records of one partition in offset
// order, in batches bounded in bytes, counting them in rp.res.
//
// It reads with a Conn rather than a Reader because under read_committed
// the records of aborted transactions and the transaction markers are
// hidden but still take offsets: a partition may end with them, and only a
// Batch tells how far a fetch got past them (Batch.Offset), where a Reader
// would wait for a record that never comes.
func (rp *replayer) replayPartition(ctx context.Context, w *kafkaclient.Writer, p kafkago.PartitionOffsets) error {
	kc, dlq, topic, o := rp.kc, rp.dlq, rp.topic, rp.o
	conn, err := kc.DialLeader(ctx, dlq, p.Partition)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	defer conn.Close()
	if _, err := conn.Seek(p.FirstOffset, kafkago.SeekAbsolute); err != nil {
		return fmt.Errorf("dlq partition %d: seek %d: %w", p.Partition, p.FirstOffset, err)
	}
	var batch []kafkago.Message
	held := 0
	flush := func() error {
		defer func() { batch, held = batch[:0], 0 }()
		if len(batch) == 0 || w == nil {
			return nil
		}
		return write(ctx, w, topic, batch)
	}
	for pos := p.FirstOffset; pos < p.LastOffset; {
		// Each fetch is bounded: the broker answers within MaxWait, the
		// deadline covers a broker that does not answer at all.
		if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return fmt.Errorf("dlq partition %d: %w", p.Partition, err)
		}
		b := conn.ReadBatchWith(kafkago.ReadBatchConfig{MinBytes: 1, MaxBytes: fetchMaxBytes,
			MaxWait: 200 * time.Millisecond, IsolationLevel: kafkago.ReadCommitted})
		done := false
		for !done {
			msg, err := b.ReadMessage()
			if err != nil {
				break
			}
			if msg.Offset >= p.LastOffset {
				done = true // written after the replay started: left for the next one
				break
			}
			if keep(msg, o.Since) {
				out, ok, err := rp.original(ctx, msg)
				if err != nil {
					_ = b.Close()
					return errors.Join(err, flush())
				}
				if ok {
					batch = append(batch, out)
					held += len(out.Key) + len(out.Value)
					rp.res.Replayed++
				} else {
					rp.res.Skipped++
				}
				if len(batch) >= replayBatchLen || held >= replayBatchBytes {
					if err := flush(); err != nil {
						_ = b.Close()
						return err
					}
				}
			}
			done = o.Limit > 0 && rp.res.Replayed >= o.Limit
		}
		err := b.Close()
		if done {
			return flush()
		}
		if err != nil && !errors.Is(err, kafkago.RequestTimedOut) {
			return errors.Join(fmt.Errorf("read dlq partition %d at offset %d: %w", p.Partition, pos, err), flush())
		}
		if err := ctx.Err(); err != nil {
			return errors.Join(fmt.Errorf("read dlq partition %d at offset %d: %w", p.Partition, pos, err), flush())
		}
		pos = b.Offset()
	}
	return flush()
}

// write writes batch to topic. A batch the broker refuses as too large (the
// main topic may accept less than a batch holds) is written again one
// record at a time, in order.
func write(ctx context.Context, w *kafkaclient.Writer, topic string, batch []kafkago.Message) error {
	err := w.WriteMessages(ctx, batch...)
	if err == nil {
		return nil
	}
	if !errors.Is(err, kafkago.MessageSizeTooLarge) && !errors.Is(err, kafkago.RecordListTooLarge) && !tooLarge(err) {
		return fmt.Errorf("write to %s: %w", topic, err)
	}
	for _, m := range batch {
		if err := w.WriteAlone(ctx, m); err != nil {
			return fmt.Errorf("write to %s: %w", topic, err)
		}
	}
	return nil
}

// tooLarge reports whether a kafkago.WriteErrors holds a size refusal.
func tooLarge(err error) bool {
	var we kafkago.WriteErrors
	if !errors.As(err, &we) {
		return false
	}
	for _, e := range we {
		if errors.Is(e, kafkago.MessageSizeTooLarge) || errors.Is(e, kafkago.RecordListTooLarge) {
			return true
		}
	}
	return false
}

// original returns the record to replay for msg, and false when msg is
// skipped. A DLQ record written without its value (x-value-omitted) is
// replayed from the original at x-original-*, read back from there; when
// those headers do not name an original the service may have read
// (originOf), or that original is gone (retention) or is not the same
// record, it is skipped and logged, since replaying an empty value would
// only dead-letter it again. The error is the cluster's failing to say
// which partitions a topic has: no record's fault.
func (rp *replayer) original(ctx context.Context, msg kafkago.Message) (kafkago.Message, bool, error) {
	if _, omitted := header(msg, kafkain.HeaderValueOmitted); !omitted {
		return Original(msg, rp.topic), true, nil
	}
	skip := func(err error) {
		rp.log.LogAttrs(ctx, slog.LevelError, "dlq record without its value skipped: its original cannot be read",
			slog.Int("dlq_partition", msg.Partition), slog.Int64("dlq_offset", msg.Offset), slog.String("error", err.Error()))
	}
	o, err := rp.originOf(msg)
	if err != nil {
		skip(err)
		return kafkago.Message{}, false, nil
	}
	n, err := rp.partitionsOf(ctx, o.topic)
	if err != nil {
		return kafkago.Message{}, false, err
	}
	if o.partition >= n {
		skip(fmt.Errorf("x-original-partition %d: %s has %d partitions", o.partition, o.topic, n))
		return kafkago.Message{}, false, nil
	}
	first, end, err := rp.offsetsOf(ctx, o.topic, o.partition)
	if err != nil {
		return kafkago.Message{}, false, err
	}
	if o.offset < first || o.offset >= end {
		// Outside the partition: a reader would wait for it (at the end)
		// or be moved elsewhere (before the start).
		skip(fmt.Errorf("x-original-offset %d: %s/%d holds offsets [%d, %d) (retention passed?)", o.offset, o.topic, o.partition, first, end))
		return kafkago.Message{}, false, nil
	}
	src, err := readOriginal(ctx, rp.kc, msg, o)
	if err != nil {
		skip(err)
		return kafkago.Message{}, false, nil
	}
	return Original(src, rp.topic), true, nil
}

// origin is where a stub says its original is.
type origin struct {
	topic     string
	partition int
	offset    int64
}

// maxQuoted bounds a header value quoted in an error: a DLQ record's
// headers may be anything.
const maxQuoted = 64

// originOf reads the x-original-* headers of a stub: the topic must be the
// main topic or a configured tier (not any topic the credentials can
// read), the partition and the offset non-negative integers, written as
// the service writes them.
func (rp *replayer) originOf(msg kafkago.Message) (origin, error) {
	t, _ := header(msg, kafkain.HeaderOriginalTopic)
	ps, _ := header(msg, kafkain.HeaderOriginalPartition)
	offs, _ := header(msg, kafkain.HeaderOriginalOffset)
	if !rp.origins[t] {
		return origin{}, fmt.Errorf("x-original-topic %.*q is not the main topic or a configured retry tier", maxQuoted, t)
	}
	part, err := strconv.ParseInt(ps, 10, 32)
	if err != nil || part < 0 || strconv.FormatInt(part, 10) != ps {
		return origin{}, fmt.Errorf("x-original-partition %.*q is not a partition number", maxQuoted, ps)
	}
	off, err := strconv.ParseInt(offs, 10, 64)
	if err != nil || off < 0 || strconv.FormatInt(off, 10) != offs {
		return origin{}, fmt.Errorf("x-original-offset %.*q is not an offset", maxQuoted, offs)
	}
	return origin{topic: t, partition: int(part), offset: off}, nil
}

// partitionsOf returns how many partitions topic has (0 when it does not
// exist), asking the cluster once per topic.
func (rp *replayer) partitionsOf(ctx context.Context, topic string) (int, error) {
	if n, ok := rp.partitions[topic]; ok {
		return n, nil
	}
	counts, err := rp.kc.Partitions(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	rp.partitions[topic] = counts[topic]
	return counts[topic], nil
}

// offsetsOf returns the first offset of a partition and its last stable
// offset (read_committed, as the original is read).
func (rp *replayer) offsetsOf(ctx context.Context, topic string, partition int) (first, end int64, err error) {
	cl, done := rp.kc.Client()
	defer done()
	lo, err := cl.ListOffsets(ctx, &kafkago.ListOffsetsRequest{IsolationLevel: kafkago.ReadCommitted,
		Topics: map[string][]kafkago.OffsetRequest{topic: {kafkago.FirstOffsetOf(partition), kafkago.LastOffsetOf(partition)}}})
	if err != nil {
		return 0, 0, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	for _, p := range lo.Topics[topic] {
		if p.Partition != partition {
			continue
		}
		if p.Error != nil {
			return 0, 0, fmt.Errorf("offsets of %s/%d: %w", topic, partition, p.Error)
		}
		return p.FirstOffset, p.LastOffset, nil
	}
	return 0, 0, fmt.Errorf("offsets of %s/%d: not in the reply", topic, partition)
}

// readOriginal reads the record at o, and checks that it has msg's key.
func readOriginal(ctx context.Context, kc *kafkaclient.Cluster, msg kafkago.Message, o origin) (kafkago.Message, error) {
	t, part, off := o.topic, o.partition, o.offset
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r := newPartitionReader(kc, t, part)
	defer r.Close()
	if err := r.SetOffset(off); err != nil {
		return kafkago.Message{}, fmt.Errorf("read %s/%d@%d: %w", t, part, off, err)
	}
	src, err := r.FetchMessage(ctx)
	if err != nil {
		return kafkago.Message{}, fmt.Errorf("read %s/%d@%d: %w", t, part, off, err)
	}
	if src.Offset != off || !bytes.Equal(src.Key, msg.Key) {
		return kafkago.Message{}, fmt.Errorf("read %s/%d@%d: found offset %d with another key (retention passed?)", t, part, off, src.Offset)
	}
	if len(src.Headers) == 1 && src.Headers[0].Key == kafkago.HeadersDroppedKey {
		// Its headers were too many to decode (a header flood): a copy
		// would not be the original.
		return kafkago.Message{}, fmt.Errorf("read %s/%d@%d: the original carries %s headers, more than the %d the service reads",
			t, part, off, src.Headers[0].Value, kafkago.MaxRecordHeaders)
	}
	return src, nil
}

// keep applies --since to a record's x-failed-at. A record without a
// readable x-failed-at is kept only when no --since was given.
func keep(msg kafkago.Message, since time.Time) bool {
	if since.IsZero() {
		return true
	}
	v, ok := header(msg, kafkain.HeaderFailedAt)
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return err == nil && !t.Before(since)
}

// header returns the value of msg's last header named key, as the consumer
// reads a record's headers (kafkain.Record.Header).
func header(msg kafkago.Message, key string) (string, bool) {
	for i := len(msg.Headers) - 1; i >= 0; i-- {
		if msg.Headers[i].Key == key {
			return string(msg.Headers[i].Value), true
		}
	}
	return "", false
}

// Original rebuilds the record as first published, addressed to topic.
func Original(msg kafkago.Message, topic string) kafkago.Message {
	var hs []kafkago.Header
	for _, h := range msg.Headers {
		if !slices.Contains(kafkain.RoutingHeaders, h.Key) {
			hs = append(hs, h)
		}
	}
	return kafkago.Message{Topic: topic, Key: msg.Key, Value: msg.Value, Headers: hs}
}
