package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/procstat"
)

// The memory lines: peak RSS of the
// service working through a backlog of large valid events at in-flight 64,
// once with each event's bytes in headers (hundreds of thousands of empty
// ones: two bytes each on the wire, a Go struct each in memory) and once
// with the same bytes as a padded value; and through compression bombs on
// every partition at once (zstd, then gzip: a batch of a few kilobytes, or
// a few hundred, holding 256 MiB once decompressed) among valid events.
// The target holds for every line.
const (
	floodInFlight     = 64
	floodRecordBytes  = 900_000
	targetFloodRSSMiB = 150
	// A bomb: bombRecords records of bombRecordBytes zero bytes each in
	// one batch on every partition, between bombEvents valid events
	// before and as many after.
	bombRecords     = 8
	bombRecordBytes = 32 << 20
	bombEvents      = 10
)

// floodRun is one memory run.
type floodRun struct {
	name     string
	headers  int                 // empty headers per record; 0 for the padded value and bombs
	codec    kafkago.Compression // a bomb's; 0 for the floods
	records  int
	bytes    int // per record, on the wire, about; a bomb's batch, compressed
	hwm      int64
	took     time.Duration
	problems []string
}

func (f floodRun) what() string {
	switch {
	case f.codec != 0:
		return fmt.Sprintf("%s bombs of %d MiB (%d KB each) among valid events", f.codec, bombRecords*bombRecordBytes>>20, (f.bytes+999)/1000)
	case f.headers > 0:
		return fmt.Sprintf("%d empty headers", f.headers)
	}
	return "a padded value"
}

// memoryLine is one kind of run: a header flood, padded values, or a codec's
// bombs.
type memoryLine struct {
	name    string
	headers bool
	codec   kafkago.Compression
}

// runFloods measures every memory line, the floods with o.flood records
// each.
func runFloods(ctx context.Context, e *env, o options, log *slog.Logger) ([]floodRun, error) {
	var out []floodRun
	for i, l := range []memoryLine{{name: "headers", headers: true}, {name: "value"},
		{name: "zstd-bombs", codec: kafkago.Zstd}, {name: "gzip-bombs", codec: kafkago.Gzip}} {
		name := fmt.Sprintf("bench-flood-%d-%s", i, l.name)
		r, err := runFlood(ctx, e, o, name, l, log)
		if err != nil {
			return nil, fmt.Errorf("memory line %s: %w", name, err)
		}
		e.deleteTopics(ctx, name, log)
		out = append(out, r)
	}
	return out, nil
}

// runFlood produces the backlog, starts bin/billing at in-flight 64 and
// waits until every event is final (charged; dead-lettered as a stub for
// the header flood) and the offsets are committed to the end, then reads
// its VmHWM and stops it with SIGTERM.
func runFlood(ctx context.Context, e *env, o options, name string, l memoryLine, log *slog.Logger) (floodRun, error) {
	r := floodRun{name: name, records: o.flood, bytes: floodRecordBytes, codec: l.codec}
	if l.codec != 0 {
		r.records = o.partitions * (2*bombEvents + bombRecords)
	}
	if err := e.truncate(ctx); err != nil {
		return r, err
	}
	topic, group := name, name
	// The tiers and the DLQ get the main topic's limit from the service;
	// the main topic takes the records whole.
	big := map[string]string{"max.message.bytes": strconv.Itoa(2 << 20)}
	if err := e.kc.EnsureTopics(ctx, []kafkaclient.TopicSpec{{Name: topic, Partitions: o.partitions, Configs: big}}); err != nil {
		return r, err
	}
	t := time.Now()
	var err error
	if l.codec != 0 {
		r.bytes, err = produceBombs(ctx, e, topic, o.partitions, l.codec)
	} else {
		r.headers, err = produceFlood(ctx, e, topic, o.flood, l.headers)
	}
	if err != nil {
		return r, err
	}
	log.Info("memory line produced", slog.String("run", name), slog.Int("records", r.records), slog.Int("headers", r.headers),
		slog.Duration("took", time.Since(t)))

	stub := gatewaystub.New(gatewaystub.Options{NoCallLog: true})
	gwURL, err := stub.StartLean()
	if err != nil {
		return r, err
	}
	defer stub.Close()
	start := time.Now()
	proc, err := startBilling(ctx, e, name, topic, group, gwURL, floodInFlight, nil)
	if err != nil {
		return r, err
	}
	defer proc.close()

	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	watch := newStallWatch(floodStall)
	var (
		outcomes map[string]float64
		total    float64
	)
	tick := time.NewTicker(scrapeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%w with %v of %d events final; its log ends:\n%s", ctx.Err(), outcomes, r.records, proc.logTail())
		case err := <-proc.exited:
			return r, proc.died(err)
		case <-tick.C:
		}
		if watch.stalled(total) {
			return r, fmt.Errorf("%d events not handled: none for %s (%v so far); its log ends:\n%s", r.records, floodStall, outcomes, proc.logTail())
		}
		m, err := scrapeOutcomes(ctx, client, proc.metricsURL(), map[string]float64{})
		if err != nil {
			continue
		}
		outcomes = m
		total = 0
		for _, v := range m {
			total += v
		}
		if total < float64(r.records) {
			continue
		}
		lag, err := e.kc.Lag(ctx, group, topic)
		var behind int64
		for _, v := range lag {
			behind += v
		}
		if err == nil && behind == 0 {
			break
		}
	}
	r.took = time.Since(start)
	if r.hwm, err = procstat.PeakRSS(proc.pid()); err != nil {
		return r, err
	}
	if problem := proc.terminate(); problem != "" {
		r.problems = append(r.problems, problem)
	}
	// A record of more headers than the service reads is dead-lettered as
	// a stub, never handled (adapters/in/kafka: Record.HeadersDropped); a
	// padded one is charged; a bomb's records are dead-lettered as stubs,
	// the events around them charged.
	want := map[string]int{"charged": o.flood}
	switch {
	case l.codec != 0:
		want = map[string]int{"charged": o.partitions * 2 * bombEvents, "dead_lettered": o.partitions * bombRecords}
	case l.headers:
		want = map[string]int{"dead_lettered": o.flood}
	}
	for outcome, n := range want {
		if outcomes[outcome] != float64(n) {
			r.problems = append(r.problems, fmt.Sprintf("outcomes %v, want %d %s", outcomes, n, outcome))
		}
	}
	if got := len(stub.Charges()); got != want["charged"] {
		r.problems = append(r.problems, fmt.Sprintf("gateway charges %d, want %d", got, want["charged"]))
	}
	for _, p := range r.problems {
		log.Warn("memory line suspect", slog.String("run", name), slog.String("problem", p))
	}
	log.Info("memory line", slog.String("run", name), slog.String("records_of", r.what()),
		slog.Float64("peak_rss_mib", round1(float64(r.hwm)/(1<<20))), slog.Duration("took", r.took.Round(time.Millisecond)))
	return r, nil
}

// produceFlood writes n valid events of about floodRecordBytes each to
// topic, one record a batch, and returns the empty headers per record (0
// when the bytes are a padded value). The records share one headers slice:
// the writer only reads it.
func produceFlood(ctx context.Context, e *env, topic string, n int, headers bool) (int, error) {
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(e.brokers...),
		Topic:        topic,
		Balancer:     &kafkago.Hash{},
		BatchSize:    1,
		BatchBytes:   2 << 20,
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafkago.RequireAll,
		Transport:    e.transport(),
	}
	defer w.Close()
	var hs []kafkago.Header
	now := time.Now().UTC()
	for i := range n {
		evt, err := order.NewOrderConfirmedEvent(order.Order{
			ID: fmt.Sprintf("%s-ord-%05d", topic, i), CustomerID: "cus-1", TotalAmount: 1000 + int64(i), Currency: "EUR", ConfirmedAt: now,
		})
		if err != nil {
			return 0, err
		}
		v, err := wire.Encode(evt)
		if err != nil {
			return 0, err
		}
		msg := kafkago.Message{Key: []byte(evt.OrderID)}
		if headers {
			// An empty header is two bytes on the wire (two zero varints).
			if hs == nil {
				hs = make([]kafkago.Header, (floodRecordBytes-len(v))/2)
			}
			msg.Value, msg.Headers = v, hs
		} else {
			// An unknown member pads the event: still valid.
			pad := floodRecordBytes - len(v) - len(`,"pad":""`)
			msg.Value = append(v[:len(v)-1:len(v)-1], []byte(`,"pad":"`+strings.Repeat("x", pad)+`"}`)...)
		}
		if err := w.WriteMessages(ctx, msg); err != nil {
			return 0, fmt.Errorf("produce to %s: %w", topic, err)
		}
	}
	return len(hs), nil
}

// produceBombs writes to each of the topic's partitions bombEvents valid
// events, one batch compressed with codec of bombRecords records of
// bombRecordBytes zero bytes each, and bombEvents valid events, and returns
// the size of a bomb's batch on the wire. The batch is written raw (a
// producer's batch as it is), since a client refuses a record larger than
// its batch limit before compressing it; the broker accepts it.
func produceBombs(ctx context.Context, e *env, topic string, partitions int, codec kafkago.Compression) (int, error) {
	var bomb []kafkatest.BatchRecord
	for i := range bombRecords {
		bomb = append(bomb, kafkatest.BatchRecord{Key: fmt.Appendf(nil, "%s-bomb-%d", topic, i), Zeros: bombRecordBytes})
	}
	raw, err := kafkatest.EncodeBatch(codec, bomb...)
	if err != nil {
		return 0, err
	}
	now := time.Now().UTC()
	events := func(p int, from int) ([]byte, error) {
		var recs []kafkatest.BatchRecord
		for i := range bombEvents {
			evt, err := order.NewOrderConfirmedEvent(order.Order{ID: fmt.Sprintf("%s-p%d-ord-%03d", topic, p, from+i),
				CustomerID: "cus-1", TotalAmount: 1000 + int64(i), Currency: "EUR", ConfirmedAt: now})
			if err != nil {
				return nil, err
			}
			v, err := wire.Encode(evt)
			if err != nil {
				return nil, err
			}
			recs = append(recs, kafkatest.BatchRecord{Key: []byte(evt.OrderID), Value: v})
		}
		return kafkatest.EncodeBatch(0, recs...)
	}
	cl, done := e.client()
	defer done()
	for p := range partitions {
		before, err := events(p, 0)
		if err != nil {
			return 0, err
		}
		after, err := events(p, bombEvents)
		if err != nil {
			return 0, err
		}
		for _, b := range [][]byte{before, raw, after} {
			// A partition just created may not have its leader known yet
			// (Not Leader For Partition, seen under load): what Kafka calls
			// retriable is asked again, for up to produceRetryFor.
			give := time.Now().Add(produceRetryFor)
			for {
				res, err := cl.RawProduce(ctx, &kafkago.RawProduceRequest{Topic: topic, Partition: p, RequiredAcks: kafkago.RequireAll,
					RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(b)}})
				if err == nil && res.Error != nil {
					err = res.Error
				}
				if err == nil {
					break
				}
				if kerr, ok := errors.AsType[kafkago.Error](err); !ok || !kerr.Temporary() || time.Now().After(give) {
					return 0, fmt.Errorf("produce a %d-byte batch to %s/%d: %w", len(b), topic, p, err)
				}
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}
	return len(raw), nil
}

// produceRetryFor is how long a bomb's produce asks again while the broker
// answers with an error Kafka calls retriable.
const produceRetryFor = 30 * time.Second

// floodMarkdown is the report's section on the memory lines.
func floodMarkdown(runs []floodRun, o options) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## Peak RSS with large records\n\n")
	p("Each line: %d valid events of about %d bytes each, produced to a fresh topic of %d partitions before `bin/billing run` starts "+
		"at `BILLING_MAX_IN_FLIGHT=%d` (the gateway stub answers at once); peak RSS is the process's VmHWM once every event is final and the offsets are committed to the end. "+
		"The bytes are either empty headers (two bytes each on the wire; more than the %d a record may carry, so each is dead-lettered as a stub, its headers never decoded) or a padded value (an unknown member of the event; charged). "+
		"A bomb line writes to every partition %d valid events, one batch compressed with its codec of %d records of %d MiB of zeros each (%d MiB once decompressed, past `BILLING_KAFKA_MAX_BATCH_BYTES` at its default 32 MiB: its records are dead-lettered as stubs, never decoded) and %d valid events (charged).\n\n",
		o.flood, floodRecordBytes, o.partitions, floodInFlight, kafkain.MaxRecordHeaders,
		bombEvents, bombRecords, bombRecordBytes>>20, bombRecords*bombRecordBytes>>20, bombEvents)
	p("| record made of | records | peak RSS MiB | took |\n|---|---:|---:|---:|\n")
	for _, r := range runs {
		p("| %s | %d | %.1f | %s |\n", r.what(), r.records, float64(r.hwm)/(1<<20), r.took.Round(100*time.Millisecond))
	}
	return b.String()
}

// floodChecks are the memory lines' targets.
func floodChecks(runs []floodRun) []check {
	var out []check
	for _, r := range runs {
		mib := float64(r.hwm) / (1 << 20)
		what := fmt.Sprintf("%d records of %s", r.records, r.what())
		if r.codec != 0 {
			what = fmt.Sprintf("%s, on all %d partitions at once", r.what(), r.records/(2*bombEvents+bombRecords))
		}
		out = append(out, check{mib < targetFloodRSSMiB, "memory", fmt.Sprintf(
			"peak RSS with %s at in-flight %d: %.1f MiB; target < %d MiB", what, floodInFlight, mib, targetFloodRSSMiB)})
	}
	return out
}

// floodReport is the whole report of a run with -flood-only.
func (r *result) floodReport(e *env, o options) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# billing — `make bench`, memory lines only\n\n")
	p("Made %s by `go -C bench run ./cmd/billbench %s` (%s in all).\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.Join(o.args, " "), r.took.Round(time.Second))
	for _, f := range e.facts {
		p("- %s\n", f)
	}
	p("%s", floodMarkdown(r.floods, o))
	p("\n## Targets\n\n")
	for _, ch := range floodChecks(r.floods) {
		mark := "met"
		if !ch.ok {
			mark = "**NOT met**"
		}
		p("- %s (%s): %s\n", mark, ch.issue, ch.text)
	}
	for _, f := range r.floods {
		for _, pr := range f.problems {
			p("- problem: %s (%s): %s\n", f.name, f.what(), pr)
		}
	}
	return b.String()
}
