package kafkaclient

import (
	"time"
	"unsafe"

	kafkago "github.com/segmentio/kafka-go"
)

// Message is a record to write: its topic (the writer's partitioner picks
// the partition, by key), key, value, headers and timestamp (zero: the
// time of the write).
type Message struct {
	Topic   string
	Key     []byte
	Value   []byte
	Headers []Header
	Time    time.Time
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// kafka is m as kafka-go's message, sharing its bytes.
func (m Message) kafka() kafkago.Message {
	return kafkago.Message{Topic: m.Topic, Key: m.Key, Value: m.Value, Headers: kafkaHeaders(m.Headers), Time: m.Time}
}

// messages is ms as kafka-go's messages, sharing their bytes.
func messages(ms []Message) []kafkago.Message {
	out := make([]kafkago.Message, len(ms))
	for i, m := range ms {
		out[i] = m.kafka()
	}
	return out
}

// Header and kafka-go's have identical underlying types (this conversion
// compiles only while they do), and so the same memory layout: a slice of
// one may be read as a slice of the other (unsafe.Pointer's rule 1).
var _ = Header(kafkago.Header{})

// kafkaHeaders is hs as kafka-go's headers, sharing hs's array: a record
// may carry thousands of headers, and a copy would allocate a second array
// on every write.
func kafkaHeaders(hs []Header) []kafkago.Header {
	//nolint:gosec // G103: the types are identical (checked above), so the reinterpretation is sound
	return unsafe.Slice((*kafkago.Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}
