package kafka

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// busyHandler finds the invoice of "p0-busy" held by another path's attempt
// for as long as the test lasts (a pod killed mid-charge, its attempt not
// expired yet); every other record is charged.
type busyHandler struct {
	chargeAll
	once    sync.Once
	waiting chan struct{} // closed at the first busy answer
}

func (h *busyHandler) Handle(ctx context.Context, msg Record) (order.Outcome, error) {
	if string(msg.Value) == "p0-busy" {
		h.once.Do(func() { close(h.waiting) })
		return "", &order.AttemptBusyError{OrderID: "p0-busy", Wait: time.Hour}
	}
	return h.chargeAll.Handle(ctx, msg)
}

// A record waiting for another path's attempt of its invoice has sent
// nothing: when its partition is revoked it gives way at once, uncommitted,
// rather than hold the rebalance for the revoke grace; the partition's new
// owner fetches it again.
func TestBusyRecordGivesWayToARebalance(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	const topic, group = "main", "g"
	kafkatest.CreateTopics(t, brokers, 2, topic)
	w := kafkatest.NewWriter(t, brokers, topic)
	w.Balancer = byKeyPrefix
	if err := w.WriteMessages(context.Background(), kafkago.Message{Key: []byte("p0-busy"), Value: []byte("p0-busy")}); err != nil {
		t.Fatal(err)
	}

	var logs syncbuf.Buffer
	hA := &busyHandler{waiting: make(chan struct{})}
	// A revoke grace far longer than the test: only giving way ends it.
	stopA := memberWith(t, brokers, group, topic, "a", hA, slog.New(slog.NewTextHandler(&logs, nil)), time.Hour)
	select {
	case <-hA.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("A never handled p0-busy")
	}

	hB := &chargeAll{}
	stopB := member(t, brokers, group, topic, "b", hB)
	poll.Until(t, "B to take partition 0 and handle p0-busy", 30*time.Second, func() bool { return hB.saw("p0-busy") })
	poll.Until(t, "partition 0 committed by B", 30*time.Second, func() bool {
		return kafkatest.CommittedOffsets(t, brokers, group, topic)[0] == 1
	})
	stopB()
	stopA()
	out := logs.String()
	if !strings.Contains(out, "gave way to shutdown or a rebalance") {
		t.Errorf("A's log has no line of the busy record giving way:\n%s", out)
	}
	if strings.Contains(out, "partitions revoked with events in flight") {
		t.Errorf("A held the rebalance for its revoke grace:\n%s", out)
	}
}

// At shutdown a record waiting for another path's attempt gives way at
// once: Run returns without spending the drain budget, and the record's
// offset stays uncommitted for the next owner.
func TestBusyRecordGivesWayToShutdown(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	const topic, group = "main", "g"
	kafkatest.CreateTopics(t, brokers, 2, topic)
	w := kafkatest.NewWriter(t, brokers, topic)
	w.Balancer = byKeyPrefix
	if err := w.WriteMessages(context.Background(),
		kafkago.Message{Key: []byte("p1-a"), Value: []byte("p1-a")},
		kafkago.Message{Key: []byte("p0-busy"), Value: []byte("p0-busy")}); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	h := &busyHandler{waiting: make(chan struct{})}
	stop := memberWith(t, brokers, group, topic, "a", h, slog.New(slog.NewTextHandler(&logs, nil)), time.Second)
	select {
	case <-h.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("p0-busy never handled")
	}
	poll.Until(t, "p1-a committed", 30*time.Second, func() bool {
		return kafkatest.CommittedOffsets(t, brokers, group, topic)[1] == 1
	})
	stop()
	out := logs.String()
	if strings.Contains(out, "drain budget spent") {
		t.Errorf("shutdown waited out its drain budget for a record that had sent nothing:\n%s", out)
	}
	if !strings.Contains(out, "gave way to shutdown or a rebalance") {
		t.Errorf("no line of the busy record giving way:\n%s", out)
	}
	if got := kafkatest.CommittedOffsets(t, brokers, group, topic)[0]; got > 0 {
		t.Errorf("partition 0 committed at %d, want nothing past p0-busy", got)
	}
}

// TestAttemptWaitIsSeen: an event waiting for another path's attempt of
// its invoice holds its partition's commits behind it; the wait is
// counted once per event, shown while it lasts, and logged when it begins
// and ends with the order it waits for (issue 31.7: it was invisible).
func TestAttemptWaitIsSeen(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var logs syncbuf.Buffer
	r.log = slog.New(slog.NewJSONHandler(&logs, nil))
	release := make(chan struct{})
	h := &scriptedHandler{fn: func(v string, n int) (order.Outcome, error) {
		if v == "busy" {
			select {
			case <-release:
				return order.OutcomeCharged, nil
			default:
				return "", &order.AttemptBusyError{OrderID: "ord-busy", Wait: 10 * time.Second}
			}
		}
		return order.OutcomeCharged, nil
	}}
	r.send(t, "busy")
	r.run(t, 0, r.topic, r.group, h, kafkatest.NewMessageWriter(t, r.brokers, ""))
	poll.Until(t, "the event waiting, three looks in", 15*time.Second, func() bool {
		return h.count("busy") >= 3 && testGauge(t, r.m.AttemptWaiting) == 1
	})
	if got := testutil.ToFloat64(r.m.AttemptWaits.WithLabelValues(r.topic)); got != 1 {
		t.Errorf("billing_attempt_waits_total{topic=main} = %v after %d looks, want 1 (one per event)", got, h.count("busy"))
	}
	close(release)
	poll.Until(t, "the event charged, its wait over", 15*time.Second, func() bool {
		return testutil.ToFloat64(r.m.Events.WithLabelValues(string(order.OutcomeCharged))) == 1 && testGauge(t, r.m.AttemptWaiting) == 0
	})
	out := logs.String()
	for _, want := range []string{`"msg":"event waits for another attempt of its invoice`, `"msg":"event waited for another attempt of its invoice"`, `"order_id":"ord-busy"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
