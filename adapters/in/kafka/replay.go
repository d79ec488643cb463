package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	kafkaclient "github.com/acme/billing/infra/kafka"
)

// `billing dlq replay` is this package's second inbound path beside the
// consumer: it reads the DLQ through the same door (ReadLog, source.go)
// and writes through the same writer (ClientWriter, writer.go). It copies
// dead-lettered records back to the main topic: value, key and original
// headers unchanged, the routing headers dropped, so the record comes back
// with its original event_id and dedup (or the invoice guard) makes a
// second replay harmless. Each copy carries x-replayed-at, the replay's
// time: the consumer counts it in billing_replayed_events_total rather
// than in the delay SLI, which observed its event when it was
// dead-lettered.

// ReplayOptions filters what is replayed.
type ReplayOptions struct {
	Since  time.Time // keep records whose x-failed-at is at or after Since (zero: all)
	Limit  int       // stop after Limit records (0: no limit)
	DryRun bool      // count, write nothing
	// Tiers are the retry tier topics which, besides the main topic, a
	// stub's x-original-topic may name (the service's configured tiers).
	Tiers []string
	// MaxBatchBytes bounds what a compressed batch read by the replay may
	// hold once decompressed (BILLING_KAFKA_MAX_BATCH_BYTES; 0: the same
	// default, 32 MiB).
	MaxBatchBytes int
}

// ReplayResult is what a replay did.
type ReplayResult struct {
	Replayed int // records written (or, dry, that would be)
	Skipped  int // records that could not be replayed, each logged
}

// Replay reads dlq from the start of every partition up to the last stable
// offsets seen when it starts (no stored position: records added meanwhile
// wait for the next replay; a transaction still open on the DLQ is left
// for the next one too, instead of waited for), and copies the selected
// records to topic. Writes are acknowledged by all in-sync replicas before
// Replay returns.
//
// Nothing a DLQ record says is trusted: a stub (x-value-omitted) is
// replayed from its original only when x-original-topic is topic or one of
// o.Tiers, x-original-partition a partition of it and x-original-offset an
// offset that partition still holds; any other stub, one whose original is
// not the same record, and a record with more headers of its own than a
// record may carry, are skipped, logged and counted in
// ReplayResult.Skipped, and the replay goes on.
func Replay(ctx context.Context, kc *kafkaclient.Cluster, dlq, topic string, o ReplayOptions, log *slog.Logger) (ReplayResult, error) {
	rp := &replayer{kc: kc, access: kc.Access(), dlq: dlq, topic: topic, o: o, log: log,
		at: time.Now().UTC().Format(time.RFC3339), origins: map[string]bool{topic: true}, partitions: map[string]int{}}
	for _, t := range o.Tiers {
		rp.origins[t] = true
	}
	err := rp.run(ctx)
	return rp.res, err
}

// replayer is one replay.
type replayer struct {
	kc         *kafkaclient.Cluster
	access     kafkaclient.Access
	dlq, topic string
	o          ReplayOptions
	log        *slog.Logger
	at         string          // x-replayed-at of every record this replay writes (RFC 3339)
	origins    map[string]bool // topics a stub's original may be read from
	partitions map[string]int  // partition counts of origins, looked up once each
	res        ReplayResult
}

func (rp *replayer) run(ctx context.Context) error {
	parts, err := rp.kc.Offsets(ctx, rp.dlq)
	if err != nil {
		return fmt.Errorf("dlq offsets: %w", err)
	}
	var w *ClientWriter
	if !rp.o.DryRun {
		kw, closeW := rp.kc.NewWriter()
		defer func() { _ = closeW() }()
		w = NewClientWriter(kw)
	}
	for _, p := range parts {
		if p.End <= p.First {
			continue
		}
		if err := rp.replayPartition(ctx, w, p); err != nil {
			return err
		}
		if rp.o.Limit > 0 && rp.res.Replayed >= rp.o.Limit {
			break
		}
	}
	rp.log.Info("dlq replay finished", slog.Int("records", rp.res.Replayed), slog.Int("skipped", rp.res.Skipped),
		slog.Bool("dry_run", rp.o.DryRun))
	return nil
}

// Replay holds at most about replayBatchBytes of records waiting for their
// write, besides the fetch it reads (ReadLog). A batch is acknowledged
// before more records are taken, so the records of a partition reach the
// main topic in offset order.
const (
	replayBatchBytes = 1_000_000
	replayBatchLen   = 100
)

// replayPartition copies the selected records of one partition in offset
// order, in batches bounded in bytes, counting them in rp.res.
func (rp *replayer) replayPartition(ctx context.Context, w *ClientWriter, p kafkaclient.PartitionOffsets) error {
	var batch []Record
	held := 0
	flush := func() error {
		defer func() { batch, held = batch[:0], 0 }()
		if len(batch) == 0 || w == nil {
			return nil
		}
		return writeReplayed(ctx, w, rp.topic, batch)
	}
	err := ReadLog(ctx, rp.access, rp.dlq, p.Partition, p.First, p.End, rp.o.MaxBatchBytes, func(rec Record) (bool, error) {
		if keep(rec, rp.o.Since) {
			out, ok, err := rp.original(ctx, rec)
			if err != nil {
				return false, err
			}
			if ok {
				out.Headers = append(out.Headers, Header{Key: HeaderReplayedAt, Value: []byte(rp.at)})
				batch = append(batch, out)
				held += len(out.Key) + len(out.Value)
				rp.res.Replayed++
			} else {
				rp.res.Skipped++
			}
			if len(batch) >= replayBatchLen || held >= replayBatchBytes {
				if err := flush(); err != nil {
					return false, err
				}
			}
		}
		return rp.o.Limit == 0 || rp.res.Replayed < rp.o.Limit, nil
	})
	if err != nil {
		err = fmt.Errorf("dlq: %w", err)
	}
	return errors.Join(err, flush())
}

// writeReplayed writes batch to topic. A batch the broker refuses as too large (the
// main topic may accept less than a batch holds) is written again one
// record at a time, in order.
func writeReplayed(ctx context.Context, w *ClientWriter, topic string, batch []Record) error {
	err := w.WriteRecords(ctx, batch...)
	if err == nil {
		return nil
	}
	if !tooLarge(err) {
		return fmt.Errorf("write to %s: %w", topic, err)
	}
	for _, r := range batch {
		if err := w.WriteAlone(ctx, r); err != nil {
			return fmt.Errorf("write to %s: %w", topic, err)
		}
	}
	return nil
}

// original returns the record to replay for rec, and false when rec is
// skipped. A DLQ record written without its value (x-value-omitted) is
// replayed from the original at x-original-*, read back from there; when
// those headers do not name an original the service may have read
// (originOf), or that original is gone (retention) or is not the same
// record, it is skipped and logged, since replaying an empty value would
// only dead-letter it again. The error is the cluster's failing to say
// which partitions a topic has: no record's fault.
func (rp *replayer) original(ctx context.Context, rec Record) (Record, bool, error) {
	skip := func(err error) {
		rp.log.LogAttrs(ctx, slog.LevelError, "dlq record without its value skipped: its original cannot be read",
			slog.Int("dlq_partition", rec.Partition), slog.Int64("dlq_offset", rec.Offset), slog.String("error", err.Error()))
	}
	switch {
	case rec.BatchOmitted != "":
		// A DLQ batch over the bound: its records are not known.
		skip(fmt.Errorf("a record of a compressed batch not decoded: %s", rec.BatchOmitted))
		return Record{}, false, nil
	case rec.HeadersDropped > 0:
		// More headers than a record may carry: the consumer would
		// dead-letter it again.
		rp.log.LogAttrs(ctx, slog.LevelError, "dlq record skipped: more headers than a record may carry",
			slog.Int("dlq_partition", rec.Partition), slog.Int64("dlq_offset", rec.Offset),
			slog.String("error", fmt.Sprintf("it carries %d headers of its own, more than the %d a record may carry", rec.HeadersDropped, MaxRecordHeaders)))
		return Record{}, false, nil
	}
	size, omitted := rec.Header(HeaderValueOmitted)
	if !omitted {
		return originalOf(rec, rp.topic), true, nil
	}
	if size == ValueOmittedUnknown {
		// It stands for a record of a compressed batch the service never
		// decoded (x-error names the batch): reading the original would
		// meet the same batch (docs/interface.md §5).
		skip(errors.New("it stands for a record of a compressed batch over BILLING_KAFKA_MAX_BATCH_BYTES, never decoded"))
		return Record{}, false, nil
	}
	o, err := rp.originOf(rec)
	if err != nil {
		skip(err)
		return Record{}, false, nil
	}
	n, err := rp.partitionsOf(ctx, o.topic)
	if err != nil {
		return Record{}, false, err
	}
	if o.partition >= n {
		skip(fmt.Errorf("x-original-partition %d: %s has %d partitions", o.partition, o.topic, n))
		return Record{}, false, nil
	}
	offs, err := rp.kc.Offsets(ctx, o.topic, o.partition)
	if err != nil {
		return Record{}, false, err
	}
	if first, end := offs[0].First, offs[0].End; o.offset < first || o.offset >= end {
		// Outside the partition: nothing there to read.
		skip(fmt.Errorf("x-original-offset %d: %s/%d holds offsets [%d, %d) (retention passed?)", o.offset, o.topic, o.partition, first, end))
		return Record{}, false, nil
	}
	src, err := rp.readOriginal(ctx, rec, o)
	if err != nil {
		skip(err)
		return Record{}, false, nil
	}
	return originalOf(src, rp.topic), true, nil
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
func (rp *replayer) originOf(rec Record) (origin, error) {
	t, _ := rec.Header(HeaderOriginalTopic)
	ps, _ := rec.Header(HeaderOriginalPartition)
	offs, _ := rec.Header(HeaderOriginalOffset)
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

// readOriginal reads the record at o, and checks that it is there (not
// hidden: a record of an aborted transaction, or a marker) and has rec's
// key.
func (rp *replayer) readOriginal(ctx context.Context, rec Record, o origin) (Record, error) {
	t, part, off := o.topic, o.partition, o.offset
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var src *Record
	err := ReadLog(ctx, rp.access, t, part, off, off+1, rp.o.MaxBatchBytes, func(r Record) (bool, error) {
		src = &r
		return false, nil
	})
	switch {
	case err != nil:
		return Record{}, fmt.Errorf("read %s/%d@%d: %w", t, part, off, err)
	case src == nil || !bytes.Equal(src.Key, rec.Key):
		return Record{}, fmt.Errorf("read %s/%d@%d: no record with its key there (retention passed?)", t, part, off)
	case src.HeadersDropped > 0:
		// Its headers were too many to decode (a header flood), or more
		// than a record may carry: the service never billed it.
		return Record{}, fmt.Errorf("read %s/%d@%d: the original carries %d headers of its own, more than the %d a record may carry",
			t, part, off, src.HeadersDropped, MaxRecordHeaders)
	case src.BatchOmitted != "":
		return Record{}, fmt.Errorf("read %s/%d@%d: %s, not decoded", t, part, off, src.BatchOmitted)
	}
	return *src, nil
}

// keep applies --since to a record's x-failed-at. A record without a
// readable x-failed-at is kept only when no --since was given.
func keep(rec Record, since time.Time) bool {
	if since.IsZero() {
		return true
	}
	v, ok := rec.Header(HeaderFailedAt)
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return err == nil && !t.Before(since)
}

// originalOf rebuilds the record as first published, addressed to topic:
// the routing headers dropped, and an earlier replay's x-replayed-at too
// (the replay adds its own); its partition is the writer's to choose.
func originalOf(rec Record, topic string) Record {
	var hs []Header
	for _, h := range rec.Headers {
		if !slices.Contains(RoutingHeaders, h.Key) && h.Key != HeaderReplayedAt {
			hs = append(hs, h)
		}
	}
	return Record{Topic: topic, Key: rec.Key, Value: rec.Value, Headers: hs}
}
