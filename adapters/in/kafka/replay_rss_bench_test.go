package kafka

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/needs"
)

// BenchmarkReplayPeakRSS: peak RSS of the real binary's `dlq replay`, dry
// and real, over 300 records of 1 MB on the real broker, reported as the
// metrics dry-peak-MiB and peak-MiB (a benchmark, not a check: run it with
// BILLING_E2E=1 go test -run '^$' -bench ReplayPeakRSS -benchtime 1x ./adapters/in/kafka/).
func BenchmarkReplayPeakRSS(b *testing.B) {
	if !needs.E2E() {
		b.Skip("writes 300 MB to a real broker and builds the binary: BILLING_E2E=1 only")
	}
	t := b
	brokers := kafkatest.SharedReal(t).Brokers()
	main, dlq := kafkatest.UniqueName(t, "main"), kafkatest.UniqueName(t, "dlq")
	createSizedTopics(t, brokers, 3, 2<<20, main, dlq)

	const records, size = 300, 1_000_000
	value := bytes.Repeat([]byte("v"), size)
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: dlq, Transport: tr, BatchBytes: 4 << 20,
		BatchTimeout: time.Millisecond, RequiredAcks: kafkago.RequireAll}
	for i := range records {
		msg := kafkago.Message{Key: []byte("ord-" + strconv.Itoa(i)), Value: value, Headers: []kafkago.Header{
			{Key: "x-original-topic", Value: []byte(main)}, {Key: "x-error", Value: []byte("not JSON")},
			{Key: "x-failed-at", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}}}
		if err := w.WriteMessages(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	bin := filepath.Join(t.TempDir(), "billing")
	build := exec.Command("go", "build", "-o", bin, "./cmd/billing")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"dlq", "replay", "--dry-run"}, {"dlq", "replay"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "BILLING_KAFKA_BROKERS="+strings.Join(brokers, ","), "BILLING_KAFKA_TOPIC="+main,
			"BILLING_KAFKA_DLQ_TOPIC="+dlq, "BILLING_DATABASE_URL=postgres://u@127.0.0.1:1/db",
			"BILLING_PAYMENT_BASE_URL=http://127.0.0.1:1", "BILLING_LOG_LEVEL=warn")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("billing %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		metric := "peak-MiB"
		if len(args) == 3 {
			metric = "dry-peak-MiB"
		}
		b.ReportMetric(float64(ru.Maxrss)/1024, metric)
		t.Logf("billing %s: %q, %v", strings.Join(args, " "), strings.TrimSpace(stdout.String()), time.Since(start).Round(time.Millisecond))
		if want := fmt.Sprintf("replay%s %d records", map[bool]string{true: "", false: "ed"}[len(args) == 3], records); !strings.Contains(stdout.String(), want) {
			t.Errorf("output %q, want %q", stdout.String(), want)
		}
	}
}

// createTopics creates topics with partitions and max.message.bytes.
func createSizedTopics(t testing.TB, brokers []string, partitions, maxBytes int, topics ...string) {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr, Timeout: 30 * time.Second}
	req := &kafkago.CreateTopicsRequest{}
	for _, topic := range topics {
		req.Topics = append(req.Topics, kafkago.TopicConfig{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1,
			ConfigEntries: []kafkago.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(maxBytes)}}})
	}
	res, err := cl.CreateTopics(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for topic, err := range res.Errors {
		if err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
	}
	kafkatest.CreateTopics(t, brokers, partitions, topics...)
}
