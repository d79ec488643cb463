package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/kafkatest"
	"github.com/acme/billing/internal/poll"
	"github.com/acme/billing/internal/syncbuf"
)

// TestReportPeakRSSLargeRecords is a report, not a check: the built binary at BILLING_MAX_IN_FLIGHT=64 works through a backlog
// of 400 valid events of 1 MB each (padded with an unknown member), and the
// test logs the process's peak RSS (VmHWM) once the group has caught up. It
// runs only when asked:
//
//	BILLING_E2E=1 BILLING_RSS_REPORT=1 go test -run TestReportPeakRSSLargeRecords -v ./e2e/
func TestReportPeakRSSLargeRecords(t *testing.T) {
	if os.Getenv("BILLING_RSS_REPORT") != "1" {
		t.Skip("a report; set BILLING_RSS_REPORT=1 to run it")
	}
	const records, size = 400, 1_000_000
	e := newEnv(t)
	w := kafkatest.NewWriter(t, e.brokers, topic)
	w.BatchBytes = 4 << 20 // under the topic's max.message.bytes
	pad := strings.Repeat("x", size-300)
	var msgs []kafkago.Message
	for i := range records {
		id := fmt.Sprintf("0190f8a4-6c1e-7b3a-9d2f-%012x", i)
		v := `{"event_id":"` + id + `","event_type":"OrderConfirmed","occurred_at":"2026-12-02T10:00:00Z",` +
			`"order_id":"ord-` + strconv.Itoa(i) + `","customer_id":"cus-9","total_amount":12990,"currency":"EUR","pad":"` + pad + `"}`
		msgs = append(msgs, kafkago.Message{Key: []byte("ord-" + strconv.Itoa(i)), Value: []byte(v)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < len(msgs); i += 20 {
		if err := w.WriteMessages(ctx, msgs[i:min(i+20, len(msgs))]...); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	msgs = nil

	p := &proc{cmd: exec.Command(binary, "run"), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	// exec keeps the last of duplicate variables: in-flight 64 wins.
	p.cmd.Env = append(e.environ(), "BILLING_MAX_IN_FLIGHT=64", "BILLING_LOG_LEVEL=warn")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	poll.Until(t, "the group to catch up", 5*time.Minute, e.caughtUp)
	hwm := vmHWM(t, p.cmd.Process.Pid)
	e.stop(p)
	if n := e.invoiceCount(); n != records {
		t.Errorf("%d invoices, want %d", n, records)
	}
	t.Logf("peak RSS of billing with %d records of %d bytes at in-flight 64: %.1f MiB", records, size, float64(hwm)/1024)
}

// vmHWM returns a process's peak RSS in KiB.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
