package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/procstat"
)

// orderMessage is a valid event of a new order id.
func orderMessage(t *testing.T, id string) kafkago.Message {
	t.Helper()
	evt, err := order.NewOrderConfirmedEvent(order.Order{ID: id, CustomerID: "cus-" + id, TotalAmount: 4200, Currency: "EUR", ConfirmedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	v, err := wire.Encode(evt)
	if err != nil {
		t.Fatal(err)
	}
	return kafkago.Message{Key: []byte(id), Value: v}
}

// TestCompressionBombsAgainstTheBinary: issue 30's reproduction. A batch of
// a few kilobytes holding 256 MiB once decompressed, in every codec, on
// four partitions at once, each between two valid events, on a real broker
// (which accepts them), consumed by the built binary at the Deployment's
// GOMEMLIMIT and the default BILLING_KAFKA_MAX_BATCH_BYTES (32 MiB). Before,
// the binary peaked at 805 MiB and the pod (256 MiB) would be killed before
// any commit, again at every restart. Now every event is billed, each bomb
// record is a DLQ stub naming its batch, every offset is committed, the
// process stays within the pod's limit, and `dlq replay` skips the stubs.
func TestCompressionBombsAgainstTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runOK("migrate")
	bombs := map[int]struct {
		codec kafkago.Compression
		size  int
	}{
		0: {kafkago.Zstd, 256 << 20},
		1: {kafkago.Gzip, 256 << 20},
		2: {kafkago.Lz4, 256 << 20},
		// Snappy compresses zeros about 20 times: 64 MiB takes 3 MB, within
		// the topic's 8 MiB.
		3: {kafkago.Snappy, 64 << 20},
	}
	var orders []string
	for p, b := range bombs {
		before, after := fmt.Sprintf("ord-bomb-p%d-before", p), fmt.Sprintf("ord-bomb-p%d-after", p)
		orders = append(orders, before, after)
		m := orderMessage(t, before)
		kafkatest.ProduceBatch(t, e.brokers, e.topic, p, 0, kafkatest.BatchRecord{Key: m.Key, Value: m.Value})
		size := kafkatest.ProduceBatch(t, e.brokers, e.topic, p, b.codec, kafkatest.BatchRecord{Key: []byte("ord-bomb"), Zeros: b.size})
		t.Logf("partition %d: a %s batch of %d bytes holding %d MiB", p, b.codec, size, b.size>>20)
		m = orderMessage(t, after)
		kafkatest.ProduceBatch(t, e.brokers, e.topic, p, 0, kafkatest.BatchRecord{Key: m.Key, Value: m.Value})
	}
	e.extra = append(e.extra, "GOMEMLIMIT=230MiB", "GOGC=200") // the Deployment's (deploy/base/deployment.yaml)
	p := e.start("run")
	poll.Until(t, "the group to commit every partition to its end", 2*time.Minute, e.caughtUp)
	hwm, err := procstat.PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	e.stop(p)
	t.Logf("peak RSS %.1f MiB", float64(hwm)/(1<<20))
	if hwm >= 256<<20 {
		t.Errorf("peak RSS %.1f MiB: the pod's limit is 256 MiB", float64(hwm)/(1<<20))
	}
	invs := e.invoices()
	for _, id := range orders {
		if invs[id].Status != order.StatusCharged {
			t.Errorf("%s: invoice %q, want charged", id, invs[id].Status)
		}
	}
	if _, ok := invs["ord-bomb"]; ok {
		t.Error("the bomb's order has an invoice")
	}
	dlq := kafkatest.ReadAll(t, e.brokers, e.dlq, len(bombs), 30*time.Second)
	for _, m := range dlq {
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		part, _ := strconv.Atoi(hs["x-original-partition"])
		want := fmt.Sprintf("%s/%d: %s record batch at base offset 1 (offsets 1-1): decompresses to more than 33554432 bytes",
			e.topic, part, bombs[part].codec)
		if len(m.Value) != 0 || hs["x-value-omitted"] != "unknown" || !strings.Contains(hs["x-error"], want) || hs["x-original-offset"] != "1" {
			t.Errorf("DLQ record of partition %d: value %d bytes, x-value-omitted %q, x-error %q; want a stub naming %q",
				part, len(m.Value), hs["x-value-omitted"], hs["x-error"], want)
		}
	}
	if out := e.runOK("dlq", "replay"); !strings.Contains(out, fmt.Sprintf("replayed 0 records, skipped %d", len(bombs))) {
		t.Errorf("dlq replay printed %q, want every stub skipped", out)
	}
}

// TestHeaderEdgeAgainstTheBinary: issue 30's 4096-header edge. An event
// with exactly 4096 headers of its own (its traceparent among them) fails
// once with a 503 and goes to a retry tier, where it is handled again with
// its routing headers and traceparent (the gateway sees them), then is
// refused (400) and reaches the DLQ with all of them; `dlq replay` writes it
// back and it is billed. An event with 4097 headers of its own is a DLQ
// stub, never sent to the gateway, and the replay skips it.
func TestHeaderEdgeAgainstTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runOK("migrate")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e.gw.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		if c.OrderID == "ord-edge" && n == 1 {
			return gatewaystub.Fault{Status: http.StatusServiceUnavailable}
		}
		if c.OrderID == "ord-edge" && n == 2 {
			return gatewaystub.Fault{Status: http.StatusBadRequest}
		}
		return gatewaystub.Fault{}
	})
	withHeaders := func(id string, own int) kafkago.Message {
		m := orderMessage(t, id)
		for i := range own - 1 {
			m.Headers = append(m.Headers, kafkago.Header{Key: "h", Value: []byte{byte('a' + i%26)}})
		}
		m.Headers = append(m.Headers, kafkago.Header{Key: "traceparent", Value: []byte(tp)})
		return m
	}
	e.produce([]kafkago.Message{withHeaders("ord-edge", 4096), withHeaders("ord-over", 4097)})
	p := e.start("run")
	poll.Until(t, "ord-edge rejected on the tier", 60*time.Second, func() bool {
		return e.invoices()["ord-edge"].Status == order.StatusRejected
	})
	dlq := kafkatest.ReadAll(t, e.brokers, e.dlq, 2, 30*time.Second)
	for _, m := range dlq {
		hs := map[string]string{}
		own := 0
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
			if !strings.HasPrefix(h.Key, "x-") {
				own++
			}
		}
		switch string(m.Key) {
		case "ord-edge":
			if own != 4096 || hs["traceparent"] != tp || hs["x-original-topic"] != e.topic || hs["x-attempt"] != "1" || len(m.Value) == 0 {
				t.Errorf("DLQ copy of ord-edge: %d own headers, x-original-topic %q, x-attempt %q, traceparent %q, value %d bytes",
					own, hs["x-original-topic"], hs["x-attempt"], hs["traceparent"], len(m.Value))
			}
		case "ord-over":
			if len(m.Value) != 0 || hs["x-value-omitted"] == "" || hs["x-original-topic"] != e.topic {
				t.Errorf("DLQ copy of ord-over: value %d bytes, headers %d; want a stub", len(m.Value), len(m.Headers))
			}
		}
	}
	if out := e.runOK("dlq", "replay"); !strings.Contains(out, "replayed 1 records, skipped 1") {
		t.Errorf("dlq replay printed %q, want ord-edge replayed and ord-over skipped", out)
	}
	e.waitCharged(t, "ord-edge")
	e.stop(p)
	var tierSaw, edgeCalls int
	for _, c := range e.gw.Calls() {
		if c.OrderID == "ord-over" {
			t.Error("ord-over was sent to the gateway")
		}
		if c.OrderID == "ord-edge" {
			edgeCalls++
			if c.TraceParent == tp {
				tierSaw++
			}
		}
	}
	if edgeCalls != 3 || tierSaw != 3 {
		t.Errorf("ord-edge: %d calls, %d with its traceparent; want 3 (main, tier, replay), each with it", edgeCalls, tierSaw)
	}
}

// waitCharged waits for id's invoice to be charged.
func (e *env) waitCharged(t *testing.T, id string) {
	t.Helper()
	poll.Until(t, id+" charged", 60*time.Second, func() bool { return e.invoices()[id].Status == order.StatusCharged })
}
