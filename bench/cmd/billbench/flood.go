package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/gatewaystub"
)

// The memory lines: peak RSS of the
// service working through a backlog of large valid events at in-flight 64,
// once with each event's bytes in headers (hundreds of thousands of empty
// ones: two bytes each on the wire, a Go struct each in memory) and once
// with the same bytes as a padded value. The target is the header flood's.
const (
	floodInFlight     = 64
	floodRecordBytes  = 900_000
	targetFloodRSSMiB = 150
)

// floodRun is one memory run.
type floodRun struct {
	name     string
	headers  int // empty headers per record; 0 for the padded value
	records  int
	bytes    int // per record, on the wire, about
	hwm      int64
	took     time.Duration
	problems []string
}

func (f floodRun) what() string {
	if f.headers > 0 {
		return fmt.Sprintf("%d empty headers", f.headers)
	}
	return "a padded value"
}

// runFloods measures both memory lines with o.flood records each.
func runFloods(ctx context.Context, e *env, o options, log *slog.Logger) ([]floodRun, error) {
	var out []floodRun
	for i, headers := range []bool{true, false} {
		name := fmt.Sprintf("bench-flood-%d-%s", i, map[bool]string{true: "headers", false: "value"}[headers])
		r, err := runFlood(ctx, e, o, name, headers, log)
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
func runFlood(ctx context.Context, e *env, o options, name string, headers bool, log *slog.Logger) (floodRun, error) {
	r := floodRun{name: name, records: o.flood, bytes: floodRecordBytes}
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
	if r.headers, err = produceFlood(ctx, e, topic, o.flood, headers); err != nil {
		return r, err
	}
	log.Info("memory line produced", slog.String("run", name), slog.Int("records", o.flood), slog.Int("headers", r.headers),
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
	deadline := time.Now().Add(5 * time.Minute)
	var outcomes map[string]float64
	tick := time.NewTicker(scrapeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case err := <-proc.exited:
			return r, proc.died(err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d events not handled within 5m (%v so far); its log ends:\n%s", o.flood, outcomes, proc.logTail())
		}
		m, err := scrapeOutcomes(ctx, client, proc.metricsURL(), map[string]float64{})
		if err != nil {
			continue
		}
		outcomes = m
		var total float64
		for _, v := range m {
			total += v
		}
		if total < float64(o.flood) {
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
	if r.hwm, err = vmHWM(proc.pid()); err != nil {
		return r, err
	}
	if problem := proc.terminate(); problem != "" {
		r.problems = append(r.problems, problem)
	}
	// A record of more headers than the service reads is dead-lettered as
	// a stub, never handled (adapters/in/kafka: Record.HeadersDropped); a
	// padded one is charged.
	want, wantCharges := "charged", o.flood
	if headers {
		want, wantCharges = "dead_lettered", 0
	}
	if outcomes[want] != float64(o.flood) {
		r.problems = append(r.problems, fmt.Sprintf("outcomes %v, want %d %s", outcomes, o.flood, want))
	}
	if got := len(stub.Charges()); got != wantCharges {
		r.problems = append(r.problems, fmt.Sprintf("gateway charges %d, want %d", got, wantCharges))
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
		Transport:    e.kc.Transport(),
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
		v, err := order.Encode(evt)
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

// floodMarkdown is the report's section on the memory lines.
func floodMarkdown(runs []floodRun, o options) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n## Peak RSS with large records\n\n")
	p("Each line: %d valid events of about %d bytes each, produced to a fresh topic of %d partitions before `bin/billing run` starts "+
		"at `BILLING_MAX_IN_FLIGHT=%d` (the gateway stub answers at once); peak RSS is the process's VmHWM once every event is final and the offsets are committed to the end. "+
		"The bytes are either empty headers (two bytes each on the wire; more than the %d a record may carry, so each is dead-lettered as a stub, its headers never decoded) or a padded value (an unknown member of the event; charged).\n\n",
		o.flood, floodRecordBytes, o.partitions, floodInFlight, kafkago.MaxRecordHeaders)
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
		if r.headers == 0 {
			continue
		}
		mib := float64(r.hwm) / (1 << 20)
		out = append(out, check{mib < targetFloodRSSMiB, "memory", fmt.Sprintf(
			"peak RSS with %d records of %d empty headers each at in-flight %d: %.1f MiB; target < %d MiB",
			r.records, r.headers, floodInFlight, mib, targetFloodRSSMiB)})
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
