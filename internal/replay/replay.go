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

	"github.com/acme/billing/adapters/in/kafka"
	kafkaclient "github.com/acme/billing/infra/kafka"
)

// Options filters what is replayed.
type Options struct {
	Since  time.Time // keep records whose x-failed-at is at or after Since (zero: all)
	Limit  int       // stop after Limit records (0: no limit)
	DryRun bool      // count, write nothing
}

// Run reads dlq from the start of every partition up to the high-water
// marks seen when it starts (no stored position: records added meanwhile
// wait for the next replay), and copies the selected records to topic. It
// returns how many records were (or, dry, would be) replayed. Writes are
// acknowledged by all in-sync replicas before Run returns.
func Run(ctx context.Context, kc *kafkaclient.Cluster, dlq, topic string, o Options, log *slog.Logger) (int, error) {
	cl, done := kc.Client()
	defer done()
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{dlq}})
	if err != nil {
		return 0, fmt.Errorf("dlq metadata: %w", err)
	}
	var reqs []kafkago.OffsetRequest
	for _, t := range md.Topics {
		if t.Error != nil {
			return 0, fmt.Errorf("dlq topic %s: %w", dlq, t.Error)
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
		return 0, fmt.Errorf("dlq offsets: %w", err)
	}
	parts := lo.Topics[dlq]
	slices.SortFunc(parts, func(a, b kafkago.PartitionOffsets) int { return a.Partition - b.Partition })

	var w *kafkaclient.Writer
	if !o.DryRun {
		var closeW func() error
		w, closeW = kc.NewWriter()
		defer func() { _ = closeW() }()
	}
	n := 0
	for _, p := range parts {
		if p.Error != nil {
			return n, fmt.Errorf("dlq partition %d: %w", p.Partition, p.Error)
		}
		if p.LastOffset <= p.FirstOffset {
			continue
		}
		got, err := replayPartition(ctx, kc, w, dlq, topic, p, o, n, log)
		n += got
		if err != nil {
			return n, err
		}
		if o.Limit > 0 && n >= o.Limit {
			break
		}
	}
	log.Info("dlq replay finished", slog.Int("records", n), slog.Bool("dry_run", o.DryRun))
	return n, nil
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
// caller sets; readOriginal uses it for the one record a stub points to.
func newPartitionReader(kc *kafkaclient.Cluster, topic string, partition int) *kafkago.Reader {
	return kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:        kc.Brokers(),
		Topic:          topic,
		Partition:      partition,
		Dialer:         kc.Dialer(),
		MaxBytes:       fetchMaxBytes,
		QueueCapacity:  queueCapacity,
		MaxWait:        200 * time.Millisecond,
		IsolationLevel: kafkago.ReadCommitted,
	})
}

// replayPartition copies the selected records of one partition in offset
// order, in batches bounded in bytes, and returns how many it selected.
//
// It reads with a Conn rather than a Reader because under read_committed
// the records of aborted transactions and the transaction markers are
// hidden but still take offsets: a partition may end with them, and only a
// Batch tells how far a fetch got past them (Batch.Offset), where a Reader
// would wait for a record that never comes.
func replayPartition(ctx context.Context, kc *kafkaclient.Cluster, w *kafkaclient.Writer, dlq, topic string,
	p kafkago.PartitionOffsets, o Options, already int, log *slog.Logger) (int, error) {
	conn, err := kc.DialLeader(ctx, dlq, p.Partition)
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	defer conn.Close()
	if _, err := conn.Seek(p.FirstOffset, kafkago.SeekAbsolute); err != nil {
		return 0, fmt.Errorf("dlq partition %d: seek %d: %w", p.Partition, p.FirstOffset, err)
	}
	n := 0
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
			return n, fmt.Errorf("dlq partition %d: %w", p.Partition, err)
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
				if out, ok := original(ctx, kc, msg, topic, log); ok {
					batch = append(batch, out)
					held += len(out.Key) + len(out.Value)
					n++
				}
				if len(batch) >= replayBatchLen || held >= replayBatchBytes {
					if err := flush(); err != nil {
						_ = b.Close()
						return n, err
					}
				}
			}
			done = o.Limit > 0 && already+n >= o.Limit
		}
		err := b.Close()
		if done {
			return n, flush()
		}
		if err != nil && !errors.Is(err, kafkago.RequestTimedOut) {
			return n, errors.Join(fmt.Errorf("read dlq partition %d at offset %d: %w", p.Partition, pos, err), flush())
		}
		if err := ctx.Err(); err != nil {
			return n, errors.Join(fmt.Errorf("read dlq partition %d at offset %d: %w", p.Partition, pos, err), flush())
		}
		pos = b.Offset()
	}
	return n, flush()
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

// tooLarge reports whether a kafka.WriteErrors holds a size refusal.
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

// original returns the record to replay for msg. A DLQ record written
// without its value (x-value-omitted) is replayed from the original at
// x-original-*, read back from there; when that is gone (retention) or is
// not the same record, it is skipped and logged, since replaying an empty
// value would only dead-letter it again.
func original(ctx context.Context, kc *kafkaclient.Cluster, msg kafkago.Message, topic string, log *slog.Logger) (kafkago.Message, bool) {
	if _, omitted := kafka.Header(msg, kafka.HeaderValueOmitted); !omitted {
		return Original(msg, topic), true
	}
	src, err := readOriginal(ctx, kc, msg)
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "dlq record without its value skipped: its original cannot be read",
			slog.Int("dlq_partition", msg.Partition), slog.Int64("dlq_offset", msg.Offset), slog.String("error", err.Error()))
		return kafkago.Message{}, false
	}
	return Original(src, topic), true
}

// readOriginal reads the record x-original-* of msg point to, and checks
// that it has msg's key.
func readOriginal(ctx context.Context, kc *kafkaclient.Cluster, msg kafkago.Message) (kafkago.Message, error) {
	t, _ := kafka.Header(msg, kafka.HeaderOriginalTopic)
	ps, _ := kafka.Header(msg, kafka.HeaderOriginalPartition)
	offs, _ := kafka.Header(msg, kafka.HeaderOriginalOffset)
	part, perr := strconv.Atoi(ps)
	off, oerr := strconv.ParseInt(offs, 10, 64)
	if t == "" || perr != nil || oerr != nil {
		return kafkago.Message{}, errors.New("x-original-* headers missing or unreadable")
	}
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
	return src, nil
}

// keep applies --since to a record's x-failed-at. A record without a
// readable x-failed-at is kept only when no --since was given.
func keep(msg kafkago.Message, since time.Time) bool {
	if since.IsZero() {
		return true
	}
	v, ok := kafka.Header(msg, kafka.HeaderFailedAt)
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return err == nil && !t.Before(since)
}

// Original rebuilds the record as first published, addressed to topic.
func Original(msg kafkago.Message, topic string) kafkago.Message {
	var hs []kafkago.Header
	for _, h := range msg.Headers {
		if !slices.Contains(kafka.RoutingHeaders, h.Key) {
			hs = append(hs, h)
		}
	}
	return kafkago.Message{Topic: topic, Key: msg.Key, Value: msg.Value, Headers: hs}
}
