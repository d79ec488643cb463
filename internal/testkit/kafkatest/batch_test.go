package kafkatest_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/acme/billing/internal/testkit/kafkatest"
)

// TestProduceBatchRidesOutALeaderNotYetKnown: a broker just started may
// answer a produce with NOT_LEADER_FOR_PARTITION until its metadata settles
// (the e2e suite's compression-bomb test failed so in CI). ProduceBatch
// retries what Kafka calls retriable, with the batch encoded anew.
func TestProduceBatchRidesOutALeaderNotYetKnown(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t, kafkatest.WithTopics(1, "t"))
	var refused atomic.Int32
	answerNotLeader(c, kmsg.Produce, func() bool {
		if refused.Load() >= 2 {
			return false
		}
		refused.Add(1)
		return true
	})
	kafkatest.ProduceBatch(t, c.Brokers(), "t", 0, 0, kafkatest.BatchRecord{Key: []byte("k"), Zeros: 10})
	if got := refused.Load(); got != 2 {
		t.Fatalf("the broker refused %d produces, want 2", got)
	}
	got := kafkatest.ReadAll(t, c.Brokers(), "t", 1, 10*time.Second)
	if len(got) != 1 || len(got[0].Value) != 10 {
		t.Fatalf("after the retries the topic holds %d records, want the one batch's record of 10 bytes", len(got))
	}
}
