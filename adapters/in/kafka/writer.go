package kafka

import (
	"context"
	"errors"
	"unsafe"

	kafkago "github.com/segmentio/kafka-go"

	kafkaclient "github.com/acme/billing/infra/kafka"
)

// MessageWriter writes messages: infra/kafka's Writer (RequireAll), which
// can also write a message in a batch of its own (WriteAlone).
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafkaclient.Message) error
}

// ClientWriter is the Router's Writer over a MessageWriter: it hands the
// records over as messages, sharing their bytes, and marks the broker's
// refusals for good, which reach it as kafka-go's errors, as ErrRefused.
type ClientWriter struct{ w MessageWriter }

var _ Writer = (*ClientWriter)(nil)

// NewClientWriter returns a Writer writing through w.
func NewClientWriter(w MessageWriter) *ClientWriter { return &ClientWriter{w: w} }

// WriteRecords writes recs in one call of the writer.
func (c *ClientWriter) WriteRecords(ctx context.Context, recs ...Record) error {
	msgs := make([]kafkaclient.Message, len(recs))
	for i, r := range recs {
		msgs[i] = messageOf(r)
	}
	return clientError(c.w.WriteMessages(ctx, msgs...))
}

// WriteAlone writes rec in a batch of its own when the writer can
// (infra/kafka's can), so that a refusal is about rec and nothing else; else
// as WriteRecords does.
func (c *ClientWriter) WriteAlone(ctx context.Context, rec Record) error {
	if a, ok := c.w.(interface {
		WriteAlone(ctx context.Context, msg kafkaclient.Message) error
	}); ok {
		return clientError(a.WriteAlone(ctx, messageOf(rec)))
	}
	return clientError(c.w.WriteMessages(ctx, messageOf(rec)))
}

// messageOf is r as a message to write, sharing its bytes. The partition
// is the writer's balancer's to choose, and the offset the broker's.
func messageOf(r Record) kafkaclient.Message {
	return kafkaclient.Message{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: clientHeaders(r.Headers), Time: r.Time}
}

// The package's Header and infra/kafka's have identical underlying types
// (this conversion compiles only while they do): see headersOf in
// source.go for why a slice of one may be read as a slice of the other.
var _ = Header(kafkaclient.Header{})

// clientHeaders is hs as infra/kafka's headers, sharing hs's array.
func clientHeaders(hs []Header) []kafkaclient.Header {
	//nolint:gosec // G103: the types are identical (checked above), so the reinterpretation is sound
	return unsafe.Slice((*kafkaclient.Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// clientError marks err as ErrRefused when the broker refused the write
// for good, keeping its text.
func clientError(err error) error {
	if err != nil && brokerRefused(err) {
		return markedError{err: err, mark: ErrRefused}
	}
	return err
}

// refusedErrors are the broker's answers that a retry of the same record
// gets again: the record is too large for the topic, it breaks the topic's
// rules, or this service may not write there. Anything else (leader moving,
// not enough replicas, network, timeouts) may pass on a later attempt.
var refusedErrors = []error{
	kafkago.MessageSizeTooLarge, kafkago.RecordListTooLarge, kafkago.InvalidRecord,
	kafkago.TopicAuthorizationFailed, kafkago.ClusterAuthorizationFailed, kafkago.InvalidTopic,
	kafkago.UnsupportedForMessageFormat,
}

// brokerRefused reports whether err is a write error a retry would meet again.
// kafka.MessageTooLargeError (a record over the writer's BatchBytes, never
// sent) unwraps to MessageSizeTooLarge; kafka.WriteErrors holds one error
// per message.
func brokerRefused(err error) bool {
	var we kafkago.WriteErrors
	if errors.As(err, &we) {
		n := 0
		for _, e := range we {
			if e != nil {
				if !brokerRefused(e) {
					return false
				}
				n++
			}
		}
		return n > 0
	}
	for _, target := range refusedErrors {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// tooLarge reports whether err is a broker's (or the writer's) refusal of a
// write for its size: of the batch, or of one record in it.
func tooLarge(err error) bool {
	if errors.Is(err, kafkago.MessageSizeTooLarge) || errors.Is(err, kafkago.RecordListTooLarge) {
		return true
	}
	var we kafkago.WriteErrors
	if !errors.As(err, &we) {
		return false
	}
	for _, e := range we {
		if errors.Is(e, kafkago.MessageSizeTooLarge) || errors.Is(e, kafkago.RecordListTooLarge) {
			return true
		}
	}
	return false
}
