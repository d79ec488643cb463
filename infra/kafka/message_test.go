package kafkaclient

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	kafkago "github.com/segmentio/kafka-go"
)

// A message to write becomes kafka-go's sharing its bytes and its headers'
// array: a write copies nothing a record holds.
func TestMessageSharesItsBytes(t *testing.T) {
	t.Parallel()
	m := Message{Topic: "dlq", Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "traceparent", Value: []byte("tp")}, {Key: "x-empty"}}}
	out := m.kafka()
	if out.Topic != "dlq" || &out.Key[0] != &m.Key[0] || &out.Value[0] != &m.Value[0] || len(out.Headers) != 2 ||
		unsafe.Pointer(&out.Headers[0]) != unsafe.Pointer(&m.Headers[0]) || out.Headers[1].Key != "x-empty" || out.Headers[1].Value != nil {
		t.Errorf("kafka(%+v) = %+v: want the topic, bytes and headers shared", m, out)
	}
	if out := (Message{}).kafka(); out.Headers != nil || out.Key != nil {
		t.Errorf("an empty message = %+v, want nil slices", out)
	}
}

// SASLRefused is the broker refusing the login, nothing else.
func TestSASLRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{kafkago.SASLAuthenticationFailed, true},
		{fmt.Errorf("kafka 127.0.0.1:9092: %w", kafkago.IllegalSASLState), true},
		{oneLineErrors{errors.New("dial: refused"), kafkago.UnsupportedSASLMechanism}, true},
		{kafkago.TopicAuthorizationFailed, false},
		{errors.New("connection reset"), false},
	} {
		if got := SASLRefused(tc.err); got != tc.want {
			t.Errorf("SASLRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
