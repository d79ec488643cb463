package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// A panic while handling one record is that record's permanent error: it
// goes to the DLQ with the panic in x-error, is counted, and the consumer
// keeps going and commits past it.
func TestHandlerPanicDeadLettersTheRecord(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := &scriptedHandler{fn: func(v string, _ int) (order.Outcome, error) {
		if v == "boom" {
			var m map[string]int
			m["x"]++ //nolint:staticcheck // SA5000 is the point: a nil-map write panics at run time, as a bug would
		}
		return order.OutcomeCharged, nil
	}}
	r.send(t, "ok-1", "boom", "ok-2")
	r.run(t, 0, r.topic, r.group, h, kafkatest.NewMessageWriter(t, r.brokers, ""))

	dlq := kafkatest.ReadAll(t, r.brokers, "dlq", 1, 15*time.Second)
	hs := map[string]string{}
	for _, hd := range dlq[0].Headers {
		hs[hd.Key] = string(hd.Value)
	}
	if string(dlq[0].Value) != "boom" || hs[HeaderErrorClass] != "permanent" || !strings.Contains(hs[HeaderError], "panic") ||
		strings.ContainsAny(hs[HeaderError], "\n\r") || len(hs[HeaderError]) > 1024 {
		t.Errorf("DLQ record %q headers %v: want the record, permanent, one-line x-error naming the panic", dlq[0].Value, hs)
	}
	kafkatest.WaitCommitted(t, r.brokers, r.group, r.topic, 15*time.Second)
	poll.Until(t, "the good records to be charged", 15*time.Second, func() bool { return h.count("ok-1") == 1 && h.count("ok-2") == 1 })
	if got := testutil.ToFloat64(r.m.HandlerPanics); got != 1 {
		t.Errorf("billing_handler_panics_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.m.Events.WithLabelValues("dead_lettered")); got != 1 {
		t.Errorf("dead_lettered = %v, want 1", got)
	}
}
