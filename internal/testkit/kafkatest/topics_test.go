package kafkatest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/acme/billing/internal/testkit/kafkatest"
)

// TestCreateTopicsWaitsTillTheLeadersServe: a real broker may list a new
// partition's leader in its metadata before that broker acts as the leader,
// and answer NOT_LEADER_FOR_PARTITION meanwhile (the publisher's contract on
// the real broker failed so in CI, its writer's three attempts spent). The
// fake broker here answers so to its first requests for the partitions;
// CreateTopics returns only once they are served.
func TestCreateTopicsWaitsTillTheLeadersServe(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	var refusals atomic.Int32
	refusals.Store(3)
	refuse := func() bool { return refusals.Add(-1) >= 0 }
	answerNotLeader(c, kmsg.ListOffsets, refuse)
	answerNotLeader(c, kmsg.Produce, refuse)
	kafkatest.CreateTopics(t, c.Brokers(), 2, "fresh")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(c.Brokers()...), Transport: tr}
	for p := range 2 {
		res, err := client.Produce(ctx, &kafkago.ProduceRequest{Topic: "fresh", Partition: p, RequiredAcks: kafkago.RequireAll,
			Records: kafkago.NewRecordReader(kafkago.Record{Value: kafkago.NewBytes([]byte("v"))})})
		if err == nil {
			err = res.Error
		}
		if err != nil {
			t.Fatalf("the first produce to fresh/%d after CreateTopics: %v", p, err)
		}
	}
}

// answerNotLeader makes the fake broker answer requests of key with
// NOT_LEADER_FOR_PARTITION for every partition asked about while refuse
// reports true, as a broker that does not yet act as the leader does.
func answerNotLeader(c *kafkatest.Cluster, key kmsg.Key, refuse func() bool) {
	c.Fake().ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		if !refuse() {
			return nil, nil, false
		}
		code := kerr.NotLeaderForPartition.Code
		switch r := req.(type) {
		case *kmsg.ListOffsetsRequest:
			resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
			for _, rt := range r.Topics {
				st := kmsg.NewListOffsetsResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewListOffsetsResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		case *kmsg.ProduceRequest:
			resp := r.ResponseKind().(*kmsg.ProduceResponse)
			for _, rt := range r.Topics {
				st := kmsg.NewProduceResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewProduceResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		}
		return nil, nil, false
	})
}
