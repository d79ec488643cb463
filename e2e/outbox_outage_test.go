package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// invoiceTopicOutage is how long the broker refuses the invoice events in
// TestOutboxWaitsOutAnInvoiceTopicOutage.
const invoiceTopicOutage = 60 * time.Second

// TestOutboxWaitsOutAnInvoiceTopicOutage: for a minute the broker refuses
// every write to the invoice topic (its max.message.bytes below any
// record's size) while orders keep coming. Billing goes on billing and
// stays ready; the outbox grows and says so (billing_outbox_pending,
// billing_outbox_oldest_seconds); once the broker takes writes again the
// outbox drains, and every invoice's event is on the topic under its
// transition's id.
func TestOutboxWaitsOutAnInvoiceTopicOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runOK("migrate")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := e.kc.EnsureTopics(ctx, []kafkaclient.TopicSpec{{Name: e.invoiceTopic, Partitions: partitions}}); err != nil {
		t.Fatal(err)
	}
	// maxMessageBytes sets the invoice topic's max.message.bytes (op Set)
	// or drops the override (op Delete), leaving its other configs alone.
	maxMessageBytes := func(op kafkago.ConfigOperation, v string) {
		t.Helper()
		tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
		defer tr.CloseIdleConnections()
		c := &kafkago.Client{Addr: kafkago.TCP(e.brokers...), Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.IncrementalAlterConfigs(ctx, &kafkago.IncrementalAlterConfigsRequest{Resources: []kafkago.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafkago.ResourceTypeTopic, ResourceName: e.invoiceTopic,
			Configs: []kafkago.IncrementalAlterConfigsRequestConfig{{Name: kafkaclient.MaxMessageBytesConfig, Value: v, ConfigOperation: op}},
		}}})
		if err == nil {
			for _, r := range resp.Resources {
				err = cmp.Or(err, r.Error)
			}
		}
		if err != nil {
			t.Fatalf("max.message.bytes %q (operation %d) on %s: %v", v, op, e.invoiceTopic, err)
		}
	}
	// No record fits: every write is refused (MESSAGE_TOO_LARGE). On one
	// broker min.insync.replicas cannot do it: Kafka caps it at the
	// replication factor.
	maxMessageBytes(kafkago.ConfigOperationSet, "1")

	p := e.start("run")
	base := "http://" + httpAddr(t, p)
	poll.Until(t, "billing ready", time.Minute, func() bool { return status(base+"/readyz") == http.StatusOK })
	batches, produced := 0, 0
	produceSome := func(n int) {
		e.produce(orders(t, fmt.Sprintf("ord-%03d", batches), n))
		batches++
		produced += n
	}

	// Twenty orders a second for the length of the outage.
	start, lastBatch := time.Now(), time.Time{}
	var (
		pending, oldest float64
		notReadySince   time.Time
	)
	poll.Until(t, "the invoice topic's outage to end", invoiceTopicOutage+time.Minute, func() bool {
		if time.Since(lastBatch) >= time.Second {
			produceSome(20)
			lastBatch = time.Now()
		}
		m := scrape(base + "/metrics")
		pending, oldest = max(pending, m["billing_outbox_pending"]), max(oldest, m["billing_outbox_oldest_seconds"])
		if n := m[`billing_published_events_total{type="InvoiceCharged"}`]; n != 0 {
			t.Fatalf("%v events published while the broker refuses them", n)
		}
		// A probe may miss once under load; not ready for seconds is billing
		// stopping for the invoice topic.
		switch code := status(base + "/readyz"); {
		case code == http.StatusOK:
			notReadySince = time.Time{}
		case notReadySince.IsZero():
			notReadySince = time.Now()
		case time.Since(notReadySince) > 2*time.Second:
			t.Fatalf("/readyz = %d for 2 s while only the invoice topic refuses writes, want 200: billing goes on", code)
		}
		return time.Since(start) >= invoiceTopicOutage
	})
	invoiced := e.invoiceCount()
	st, err := e.store.OutboxStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if invoiced < produced/2 || st.Pending < invoiced-100 {
		t.Errorf("after %v of outage: %d of %d orders invoiced, %d events waiting; want billing going on and every event waiting",
			invoiceTopicOutage, invoiced, produced, st.Pending)
	}
	if pending < float64(invoiced)/2 {
		t.Errorf("billing_outbox_pending reached %v with %d invoices and nothing published", pending, invoiced)
	}
	if oldest < (invoiceTopicOutage / 2).Seconds() {
		t.Errorf("billing_outbox_oldest_seconds reached %v s in a %v outage", oldest, invoiceTopicOutage)
	}

	maxMessageBytes(kafkago.ConfigOperationDelete, "") // back to the broker's default
	restored := time.Now()
	poll.Until(t, "every order invoiced, the outbox empty", 3*time.Minute, func() bool {
		st, err := e.store.OutboxStats(ctx)
		return err == nil && e.invoiceCount() == produced && st.Pending == 0 && e.caughtUp()
	})
	drained := time.Since(restored)
	e.stop(p)

	invs := e.invoices()
	ids := map[string]map[string]bool{}
	for _, m := range kafkatest.ReadAll(t, e.brokers, e.invoiceTopic, produced, time.Minute) {
		var v struct {
			EventID string `json:"event_id"`
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(m.Value, &v); err != nil {
			t.Fatalf("event %q: %v", m.Value, err)
		}
		if ids[v.OrderID] == nil {
			ids[v.OrderID] = map[string]bool{}
		}
		ids[v.OrderID][v.EventID] = true
	}
	for id, inv := range invs {
		want := order.InvoiceEventID(id, inv.EventID, inv.Status, inv.Reopens).String()
		if inv.Status != order.StatusCharged || len(ids[id]) != 1 || !ids[id][want] {
			t.Errorf("%s ends %s with event ids %v, want charged with only %s", id, inv.Status, ids[id], want)
		}
		if cs := e.gw.ChargesForOrder(id); len(cs) != 1 {
			t.Errorf("%s charged %d times", id, len(cs))
		}
	}
	t.Logf("invoice topic refusing writes for %v: %d orders produced, %d invoiced during it; outbox up to %.0f events, its oldest %.0f s; "+
		"drained %v after the broker took writes again", invoiceTopicOutage, produced, invoiced, pending, oldest, drained.Round(100*time.Millisecond))
}
