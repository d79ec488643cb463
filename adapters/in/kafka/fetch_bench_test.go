package kafka

import (
	"context"
	"strconv"
	"testing"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/internal/testkit/kafkatest"
)

// BenchmarkPartitionFetch reads 2,000 records of 200 bytes with three
// headers each through the Source's partition reader from an in-process
// broker, as a consumer's fetch loop does: what one record costs between
// the wire and the dispatcher.
//
//	go test -run '^$' -bench PartitionFetch -benchmem ./adapters/in/kafka/
func BenchmarkPartitionFetch(b *testing.B) {
	const records = 2000
	brokers := kafkatest.NewFake(b).Brokers()
	kafkatest.CreateTopics(b, brokers, 1, "main")
	w := kafkatest.NewWriter(b, brokers, "main")
	value := make([]byte, 200)
	for i := 0; i < records; i += 100 {
		var msgs []kafkago.Message
		for j := i; j < i+100; j++ {
			msgs = append(msgs, kafkago.Message{Key: []byte("k" + strconv.Itoa(j)), Value: value, Headers: []kafkago.Header{
				{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
				{Key: "x-source", Value: []byte("checkout")}, {Key: "x-empty"},
			}})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	src := newTestSource(b, kafkatest.FastReaderConfig(brokers, "g", "main"))
	defer src.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := src.OpenPartition("main", 0, kafkago.FirstOffset)
		var n int64
		for i := 0; i < records; i++ {
			msg, err := r.Fetch(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += recordBytes(msg)
		}
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Fatal("nothing read")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
}
