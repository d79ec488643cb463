package kafka

import (
	"context"
	"strconv"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// A record with more headers than the client decodes (a header flood:
// tens of megabytes a record once decoded) is not handled: it goes to the
// DLQ as a stub naming where the original is, and its partition moves on.
func TestHeaderFloodGoesToTheDLQAsAStub(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	const topic, group = "main", "g"
	kafkatest.CreateTopics(t, brokers, 1, topic, topic+".dlq")
	flood := kafkago.Message{Key: []byte("p0-flood"), Value: []byte(`{"a valid event, maybe"}`)}
	for range MaxRecordHeaders + 1 {
		flood.Headers = append(flood.Headers, kafkago.Header{Key: "h"})
	}
	w := kafkatest.NewWriter(t, brokers, topic)
	w.BatchBytes = 1 << 20
	if err := w.WriteMessages(context.Background(), flood, kafkago.Message{Key: []byte("p0-next"), Value: []byte("p0-next")}); err != nil {
		t.Fatal(err)
	}
	h := &chargeAll{}
	stop := member(t, brokers, group, topic, "a", h)
	poll.Until(t, "the next record handled and both committed", 30*time.Second, func() bool {
		return h.saw("p0-next") && kafkatest.CommittedOffsets(t, brokers, group, topic)[0] == 2
	})
	stop()
	if h.saw(string(flood.Value)) {
		t.Error("the flooded record was handled")
	}
	dlq := kafkatest.ReadAll(t, brokers, topic+".dlq", 1, 10*time.Second)
	hs := map[string]string{}
	for _, hd := range dlq[0].Headers {
		hs[hd.Key] = string(hd.Value)
	}
	if len(dlq[0].Value) != 0 || hs[HeaderValueOmitted] != strconv.Itoa(len(flood.Value)) ||
		hs[HeaderOriginalTopic] != topic || hs[HeaderOriginalOffset] != "0" || hs[HeaderErrorClass] != "permanent" || len(dlq[0].Headers) > 20 {
		t.Errorf("DLQ record: value %q, %d headers %v; want a stub (empty value, x-value-omitted %d) naming %s/0@0, permanent",
			dlq[0].Value, len(dlq[0].Headers), hs, len(flood.Value), topic)
	}
}
