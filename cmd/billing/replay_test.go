package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// dlqStub is a DLQ record written without its value, pointing at its
// original with x-original-topic, -partition and -offset.
func dlqStub(key, topic, partition, offset string) kafkago.Message {
	return kafkago.Message{Key: []byte(key), Headers: []kafkago.Header{
		{Key: kafkain.HeaderValueOmitted, Value: []byte("12")},
		{Key: kafkain.HeaderOriginalTopic, Value: []byte(topic)},
		{Key: kafkain.HeaderOriginalPartition, Value: []byte(partition)},
		{Key: kafkain.HeaderOriginalOffset, Value: []byte(offset)},
	}}
}

// `billing dlq replay` replays what it may, skips the stubs whose x-original-*
// it must not follow (another topic, a partition that cannot exist), logs
// each and counts them on its output line, and exits 0.
func TestDLQReplaySkipsHostileStubs(t *testing.T) {
	c := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, c.Brokers(), 1, "t", "d", "r.1", "payroll")
	w := kafkatest.NewWriter(t, c.Brokers(), "")
	ctx := context.Background()
	for _, m := range []kafkago.Message{
		{Topic: "r.1", Key: []byte("k"), Value: []byte("the original")},
		{Topic: "payroll", Key: []byte("k"), Value: []byte("someone else's")},
		{Topic: "d", Key: []byte("a"), Value: []byte("a whole record")},
		{Topic: "d", Key: []byte("k"), Headers: dlqStub("k", "r.1", "0", "0").Headers}, // a configured tier
		{Topic: "d", Key: []byte("k"), Headers: dlqStub("k", "payroll", "0", "0").Headers},
		{Topic: "d", Key: []byte("k"), Headers: dlqStub("k", "t", "-1", "0").Headers},
	} {
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	setValidEnv(t)
	t.Setenv("BILLING_KAFKA_BROKERS", strings.Join(c.Brokers(), ","))
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"dlq", "replay"}, &stdout, &stderr); err != nil {
		t.Fatalf("dlq replay: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if got, want := lines[len(lines)-1], "replayed 2 records, skipped 2"; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if n := strings.Count(stdout.String(), "dlq record without its value skipped"); n != 2 {
		t.Errorf("%d skip lines logged, want 2:\n%s", n, stdout.String())
	}
	var values []string
	for _, m := range kafkatest.ReadAll(t, c.Brokers(), "t", 2, 15*time.Second) {
		values = append(values, string(m.Value))
	}
	if got := strings.Join(values, "|"); got != "a whole record|the original" {
		t.Errorf("main topic holds %q, want the whole record and the tier's original", got)
	}
}
