package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	kafkago "github.com/segmentio/kafka-go"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// A fetched message becomes a Record that shares its bytes and its headers'
// array, and a Record to write becomes a message that shares its own: the
// door to kafka-go copies nothing a record holds.
func TestConversionsShareTheRecordsBytes(t *testing.T) {
	t.Parallel()
	m := kafkago.Message{Topic: "main", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"),
		Headers: []kafkago.Header{{Key: "traceparent", Value: []byte("tp")}, {Key: "x-empty"}},
		Time:    time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), HighWaterMark: 99}
	r := recordOf(m)
	if r.Topic != "main" || r.Partition != 3 || r.Offset != 42 || !r.Time.Equal(m.Time) ||
		string(r.Key) != "k" || string(r.Value) != "v" || len(r.Headers) != 2 ||
		r.Headers[0].Key != "traceparent" || string(r.Headers[0].Value) != "tp" || r.Headers[1].Key != "x-empty" || r.Headers[1].Value != nil {
		t.Fatalf("recordOf(%+v) = %+v", m, r)
	}
	if &r.Key[0] != &m.Key[0] || &r.Value[0] != &m.Value[0] || unsafe.Pointer(&r.Headers[0]) != unsafe.Pointer(&m.Headers[0]) ||
		&r.Headers[0].Value[0] != &m.Headers[0].Value[0] {
		t.Error("recordOf copied the message's bytes or headers")
	}

	out := messageOf(r) // a message has no partition or offset: the writer's balancer and the broker choose them
	if out.Topic != "main" || !out.Time.Equal(m.Time) ||
		&out.Key[0] != &r.Key[0] || &out.Value[0] != &r.Value[0] || len(out.Headers) != 2 ||
		unsafe.Pointer(&out.Headers[0]) != unsafe.Pointer(&r.Headers[0]) {
		t.Errorf("messageOf(%+v) = %+v: want the topic, bytes and headers shared", r, out)
	}

	if r := recordOf(kafkago.Message{}); r.Headers != nil || r.Key != nil || r.Value != nil {
		t.Errorf("recordOf of an empty message = %+v, want nil slices", r)
	}
}

// The ClientWriter marks as ErrRefused exactly the writes a retry would
// meet again, and keeps kafka-go's text (and error: a kafka.WriteErrors is
// still one, for errors.As).
func TestClientWriterMarksRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err     error
		refused bool
	}{
		{kafkago.MessageSizeTooLarge, true},
		{kafkago.MessageTooLargeError{}, true},
		{kafkago.WriteErrors{kafkago.TopicAuthorizationFailed}, true},
		{kafkago.WriteErrors{nil, kafkago.RecordListTooLarge}, true},
		{fmt.Errorf("write: %w", kafkago.InvalidRecord), true},
		{kafkago.WriteErrors{kafkago.MessageSizeTooLarge, kafkago.LeaderNotAvailable}, false},
		{kafkago.WriteErrors{nil}, false},
		{kafkago.NotEnoughReplicas, false},
		{errors.New("connection reset"), false},
	} {
		err := NewClientWriter(failWith{tc.err}).WriteRecords(context.Background(), Record{Topic: "t"})
		if errors.Is(err, ErrRefused) != tc.refused || err.Error() != tc.err.Error() {
			t.Errorf("%v: written as %v (refused %v), want refused %v and the same text", tc.err, err, errors.Is(err, ErrRefused), tc.refused)
		}
		err = NewClientWriter(failWith{tc.err}).WriteAlone(context.Background(), Record{Topic: "t"})
		if errors.Is(err, ErrRefused) != tc.refused {
			t.Errorf("%v alone: refused %v, want %v", tc.err, errors.Is(err, ErrRefused), tc.refused)
		}
	}
	var we kafkago.WriteErrors
	err := NewClientWriter(failWith{kafkago.WriteErrors{kafkago.MessageSizeTooLarge}}).WriteRecords(context.Background(), Record{})
	if !errors.As(err, &we) || len(we) != 1 {
		t.Errorf("%v: kafka-go's error is not kept under the mark", err)
	}
	if err := NewClientWriter(failWith{}).WriteRecords(context.Background(), Record{Topic: "t"}); err != nil {
		t.Errorf("a write that succeeds: %v", err)
	}
}

// failWith fails every write with err.
type failWith struct{ err error }

func (f failWith) WriteMessages(context.Context, ...kafkaclient.Message) error { return f.err }

// A closed GroupSource says so as ErrSourceClosed, with kafka-go's text:
// the consumer stops for good on it rather than retrying the join.
func TestClosedGroupSourceSaysSo(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	src := newTestSource(t, kafkatest.FastReaderConfig(brokers, "g", "main"))
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := src.Next(context.Background())
	if !errors.Is(err, ErrSourceClosed) || !errors.Is(err, kafkago.ErrGroupClosed) || err.Error() != kafkago.ErrGroupClosed.Error() {
		t.Errorf("Next after Close = %v, want ErrSourceClosed with kafka-go's text", err)
	}
}

// BenchmarkRecordOf is the conversion of one fetched message with three
// headers into a Record, done once per record fetched.
//
//	go test -run '^$' -bench RecordOf -benchmem ./adapters/in/kafka/
func BenchmarkRecordOf(b *testing.B) {
	m := kafkago.Message{Topic: "main", Partition: 1, Offset: 7, Key: []byte("ord-1"), Value: make([]byte, 300),
		Headers: []kafkago.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
			{Key: "x-source", Value: []byte("checkout")}, {Key: "x-empty"}},
		Time: time.Now()}
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n += recordBytes(recordOf(m))
	}
	if n == 0 {
		b.Fatal("nothing counted")
	}
}
