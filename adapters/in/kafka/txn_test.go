package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestReaderReadsCommittedOnly: the partition readers of the group source
// the service builds (NewClusterSource) never give the records of aborted
// transactions, nor the transaction markers, also when a partition ends
// with an aborted transaction that a later record follows; and a
// transaction left open holds back what follows it. On the real broker,
// whose transactions are the ones that matter, and on the in-process one,
// a second implementation of the markers and the aborted-transaction list.
func TestReaderReadsCommittedOnly(t *testing.T) {
	t.Parallel()
	for name, start := range map[string]func(testing.TB, ...kafkatest.Option) *kafkatest.Cluster{
		"kfake": kafkatest.NewFake, "real": func(t testing.TB, _ ...kafkatest.Option) *kafkatest.Cluster { return kafkatest.SharedReal(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			brokers := start(t).Brokers()
			t.Run("aborted and markers", func(t *testing.T) { readerSkipsAbortedAndMarkers(t, brokers) })
			if name == "real" {
				t.Run("open", func(t *testing.T) { readerWaitsForAnOpenTransaction(t, brokers) })
			}
		})
	}
}

// clusterReader joins a new group for topic's one partition through the
// source the service builds, and returns a reader of the partition from
// the group's offset.
func clusterReader(t *testing.T, brokers []string, topic string) partitionReader {
	t.Helper()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "txn-test"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewClusterSource(kc.Access(), topic, kafkatest.UniqueName(t, "g"), kafkatest.FastReaderOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// A new broker answers "coordinator not available" until it has made
	// its offsets topic; the group goes on trying, as the consumer's Next
	// does.
	gen, err := src.Next(ctx)
	for err != nil && ctx.Err() == nil {
		gen, err = src.Next(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	as := gen.Assignments()
	if len(as) != 1 {
		t.Fatalf("assignments %+v, want the topic's one partition", as)
	}
	r := src.OpenPartition(as[0].Topic, as[0].Partition, as[0].Offset).(partitionReader)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func txnRec(key, value string) kafkago.Message {
	return kafkago.Message{Key: []byte(key), Value: []byte(value)}
}

// readerSkipsAbortedAndMarkers: the reader sees the committed and plain
// records in order and nothing else.
func readerSkipsAbortedAndMarkers(t *testing.T, brokers []string) {
	topic := kafkatest.UniqueName(t, "txn.reader")
	kafkatest.CreateTopics(t, brokers, 1, topic)
	kafkatest.ProduceSteps(t, brokers, topic,
		kafkatest.Plain(txnRec("k", "p1")), kafkatest.Committed(txnRec("k", "a1"), txnRec("k", "a2")), kafkatest.Plain(txnRec("k", "p2")),
		kafkatest.Aborted(txnRec("k", "b1"), txnRec("k", "b2")), kafkatest.Plain(txnRec("k", "p3")), kafkatest.Committed(txnRec("k", "c")),
		kafkatest.Aborted(txnRec("k", "b3")), kafkatest.Plain(txnRec("k", "z")))
	r := clusterReader(t, brokers, topic)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []string
	for !slices.Contains(got, "z") {
		rec, err := r.Fetch(ctx)
		if err != nil {
			t.Fatalf("fetch after %q: %v", got, err)
		}
		got = append(got, string(rec.Value))
	}
	if want := []string{"p1", "a1", "a2", "p2", "p3", "c", "z"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q (no aborted record, no marker)", got, want)
	}
}

// readerWaitsForAnOpenTransaction: a transaction left open holds back what
// follows it (the last stable offset stops there); once it commits, the
// reader goes on in order.
func readerWaitsForAnOpenTransaction(t *testing.T, brokers []string) {
	topic := kafkatest.UniqueName(t, "txn.open")
	kafkatest.CreateTopics(t, brokers, 1, topic)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	txnCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(kafkatest.UniqueName(t, "txn")))
	if err != nil {
		t.Fatal(err)
	}
	defer txnCl.Close()
	if err := txnCl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txnCl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("o1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	plainCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer plainCl.Close()
	if err := plainCl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := clusterReader(t, brokers, topic)
	type fetched struct {
		value string
		err   error
	}
	read := make(chan fetched, 2)
	go func() {
		for range 2 {
			rec, err := r.Fetch(ctx)
			read <- fetched{string(rec.Value), err}
			if err != nil {
				return
			}
		}
	}()
	// The reader is fetching at the open transaction when it ends.
	poll.Until(t, "reader fetching", 10*time.Second, func() bool { return r.r.Stats().Fetches > 0 })
	if err := txnCl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		f := <-read
		if f.err != nil {
			t.Fatalf("fetch after %q: %v", got, f.err)
		}
		got = append(got, f.value)
	}
	if want := []string{"o1", "after"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q", got, want)
	}
}
