package kafka

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// BenchmarkConsumerPeakRSS reports the process's peak RSS (VmHWM) while one
// consumer at in-flight 64 works through a backlog of 400 records of 1 MB on
// a real broker (what the consumer holds fetched but not handled must be
// bounded by bytes). The broker runs in its own process, and
// the peak is reset after the backlog is written, so the figure is the
// consumer's. Run by hand:
//
//	BILLING_E2E=1 go test -run '^$' -bench ConsumerPeakRSS -benchtime 1x ./adapters/in/kafka/
//
// It is a report, not a check: nothing here fails on a figure.
func BenchmarkConsumerPeakRSS(b *testing.B) {
	const records, size = 400, 1_000_000
	c := kafkatest.SharedReal(b)
	brokers := c.Brokers()
	for i := 0; i < b.N; i++ {
		topic, group := kafkatest.UniqueName(b, "rss"), kafkatest.UniqueName(b, "g")
		kafkatest.CreateTopics(b, brokers, 4, topic)
		writeBacklog(b, brokers, topic, records, size)
		runtime.GC()
		debug.FreeOSMemory()
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			b.Skipf("cannot reset the peak RSS: %v", err)
		}
		before := procStatusKiB(b, "VmHWM")

		m := metrics.New(prometheus.NewRegistry(), false)
		log := slog.New(slog.DiscardHandler)
		pause := health.NewPause(&metrics.Outage{Paused: m.ConsumerPaused}, log)
		src := newTestSource(b, kafkatest.FastReaderConfig(brokers, group, topic))
		h := decodingHandler{}
		routes := Routes{Group: group, RetryTopics: []string{topic + ".retry.1"}, DLQTopic: topic + ".dlq", Policy: order.NewRetryPolicy(time.Second)}
		cons := NewConsumer(src, h, NewRouter(NewClientWriter(kafkatest.NewMessageWriter(b, brokers, "")), routes, m.Router(), pause, log), pause, m.Consumer(), log,
			Options{MaxInFlight: 64, CommitInterval: 200 * time.Millisecond, DrainTimeout: 10 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		b.ResetTimer()
		go func() { done <- cons.Run(ctx) }()
		kafkatest.WaitCommitted(b, brokers, group, topic, 5*time.Minute)
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		_ = src.Close()
		peak := procStatusKiB(b, "VmHWM")
		b.ReportMetric(float64(peak)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(before)/1024, "RSS-before-MiB")
	}
}

// decodingHandler decodes the event as the real handler does and takes
// 50 ms, as a slow gateway call would, so that fetching outruns handling
// and the consumer holds as much as it is allowed to.
type decodingHandler struct{}

func (decodingHandler) Handle(ctx context.Context, msg Record) (order.Outcome, error) {
	if _, err := wire.Decode(msg.Value, "USD"); err != nil {
		return "", err
	}
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return order.OutcomeCharged, nil
}

// writeBacklog writes n valid events of about size bytes each (an unknown
// member pads them), ten at a time.
func writeBacklog(b *testing.B, brokers []string, topic string, n, size int) {
	b.Helper()
	w := kafkatest.NewWriter(b, brokers, topic)
	w.BatchBytes = int64(size) + 100_000 // one record a batch: the broker takes 1 MiB a batch
	pad := strings.Repeat("x", size-300)
	for i := 0; i < n; i += 10 {
		var msgs []kafkago.Message
		for j := i; j < i+10 && j < n; j++ {
			id := fmt.Sprintf("0190f8a4-6c1e-7b3a-9d2f-%012x", j)
			v := `{"event_id":"` + id + `","event_type":"OrderConfirmed","occurred_at":"2026-12-02T10:00:00Z",` +
				`"order_id":"ord-` + strconv.Itoa(j) + `","customer_id":"cus-9","total_amount":12990,"currency":"EUR","pad":"` + pad + `"}`
			msgs = append(msgs, kafkago.Message{Key: []byte("ord-" + strconv.Itoa(j)), Value: []byte(v)})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	_ = w.Close()
}

// procStatusKiB reads a kB field of /proc/self/status.
func procStatusKiB(b *testing.B, field string) int64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
