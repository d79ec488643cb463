package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/replay"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// txnStep is one write of a test stream: plain records, or records in a
// producer transaction that is committed or aborted.
type txnStep struct {
	txn    bool
	commit bool
	recs   []kafkago.Message
}

func plain(ms ...kafkago.Message) txnStep     { return txnStep{recs: ms} }
func committed(ms ...kafkago.Message) txnStep { return txnStep{txn: true, commit: true, recs: ms} }
func aborted(ms ...kafkago.Message) txnStep   { return txnStep{txn: true, recs: ms} }
func rec(key, value string) kafkago.Message {
	return kafkago.Message{Key: []byte(key), Value: []byte(value)}
}
func keyed(key string, m kafkago.Message) kafkago.Message { m.Key = []byte(key); return m }

// produceSteps writes the steps to topic in order, the transactional ones
// with franz-go's transactional producer (kafka-go has none), the plain ones
// with a plain franz-go producer, each acknowledged before the next. The
// broker writes a transaction's marker after EndTransaction returns, so the
// next step waits for it: with every record of a step in one partition, the
// topic's offsets then hold the records and markers in the order of the steps.
func produceSteps(t *testing.T, brokers []string, topic string, steps ...txnStep) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	txnCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(kafkatest.UniqueName(t, "txn")), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer txnCl.Close()
	plainCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer plainCl.Close()
	var offsets int64
	for i, s := range steps {
		var rs []*kgo.Record
		for _, m := range s.recs {
			r := &kgo.Record{Key: m.Key, Value: m.Value}
			for _, h := range m.Headers {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			rs = append(rs, r)
		}
		cl := plainCl
		if s.txn {
			cl = txnCl
			if err := cl.BeginTransaction(); err != nil {
				t.Fatalf("step %d: begin transaction: %v", i, err)
			}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("step %d: produce: %v", i, err)
		}
		if s.txn {
			end := kgo.TryAbort
			if s.commit {
				end = kgo.TryCommit
			}
			if err := cl.EndTransaction(ctx, end); err != nil {
				t.Fatalf("step %d: end transaction (commit %v): %v", i, s.commit, err)
			}
			offsets++ // the marker
		}
		offsets += int64(len(rs))
		poll.Until(t, "records and marker of a step written", 10*time.Second, func() bool {
			var n int64
			for _, end := range kafkatest.EndOffsets(t, brokers, topic) {
				n += end
			}
			return n == offsets
		})
	}
}

// TestTransactionsRealBroker: records of aborted transactions are never
// read, billed or replayed, and transaction markers never reach the
// application (CONTRACT §4), on the real broker, whose
// transactions are the ones that matter.
func TestTransactionsRealBroker(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewReal(t).Brokers()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "txn-test"})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reader", func(t *testing.T) { readerSkipsAbortedAndMarkers(t, kc, brokers) })

	// A transaction left open holds back what follows it (the last stable
	// offset stops there); once it commits, the reader goes on in order.
	t.Run("open", func(t *testing.T) {
		topic := kafkatest.UniqueName(t, "txn.open")
		kafkatest.CreateTopics(t, brokers, 1, topic)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
		r := kafkago.NewReader(kc.ReaderConfig(topic, kafkatest.UniqueName(t, "g"), kafkatest.FastReaderOptions()))
		defer r.Close()
		// The reader is fetching at the open transaction when it ends.
		poll.Until(t, "reader fetching", 10*time.Second, func() bool { return r.Stats().Fetches > 0 })
		if err := txnCl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(got) < 2 {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("fetch after %q: %v", got, err)
			}
			got = append(got, string(m.Value))
		}
		if want := []string{"o1", "after"}; !slices.Equal(got, want) {
			t.Errorf("read %q, want %q", got, want)
		}
	})

	// The service bills the committed orders and the plain ones, never the
	// aborted one, and routes nothing to the DLQ. All records share one
	// key, so one partition: once the last plain record is billed, the
	// consumer is past the aborted transaction and both its markers.
	t.Run("service", func(t *testing.T) {
		h := newRealHarness(t, brokers)
		ev := func(id string) kafkago.Message { _, m := event(t, id, "cus-txn", 1000); return keyed("k", m) }
		produceSteps(t, brokers, testTopic,
			plain(ev("ord-p1")), committed(ev("ord-a")), plain(ev("ord-p2")), aborted(ev("ord-b")),
			plain(ev("ord-p3")), committed(ev("ord-c")), plain(ev("ord-p4")))
		for _, id := range []string{"ord-p1", "ord-a", "ord-p2", "ord-p3", "ord-c", "ord-p4"} {
			h.waitInvoice(id, order.StatusCharged)
		}
		invs, err := h.store.Invoices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, inv := range invs {
			if inv.OrderID == "ord-b" {
				t.Errorf("aborted order ord-b has an invoice: %+v", inv)
			}
		}
		if n := len(h.gw.ChargesForOrder("ord-b")); n != 0 {
			t.Errorf("aborted order ord-b charged %d times", n)
		}
		if got := h.outcome("charged"); got != 6 {
			t.Errorf("charged %d, want 6", got)
		}
		if got := h.outcome("dead_lettered"); got != 0 {
			t.Errorf("dead_lettered %d, want 0", got)
		}
		for p, end := range kafkatest.EndOffsets(t, brokers, h.cfg.KafkaDLQTopic) {
			if end != 0 {
				t.Errorf("DLQ partition %d holds %d records, want none (markers are not records)", p, end)
			}
		}
	})

	t.Run("replay", func(t *testing.T) { replayCopiesCommittedOnly(t, kc, brokers) })
	t.Run("lag", func(t *testing.T) { lagCountsRecordsNotMarkers(t, kc, brokers) })
}

// newRealHarness is newHarnessOn against the given real broker: its own
// database, gateway stub and consumer group.
func newRealHarness(t *testing.T, brokers []string) *harness {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	kafkatest.CreateTopics(t, brokers, 3, testTopic)
	gw := gatewaystub.New(gatewaystub.Options{})
	url := gw.StartTest(t)
	cfg := testConfig(brokers, dsn, url)
	cfg.KafkaGroupID = kafkatest.UniqueName(t, "billing")
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: postgres.NewStore(pool), gw: gw, brokers: brokers, cfg: cfg}
	h.start()
	t.Cleanup(h.shutdown)
	return h
}

// TestTransactionsKfake is the reader and replay cases on the in-process
// broker, which implements transactions too: quicker, and a second broker
// implementation of the markers and the aborted-transaction list.
func TestTransactionsKfake(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "txn-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("reader", func(t *testing.T) { readerSkipsAbortedAndMarkers(t, kc, brokers) })
	t.Run("replay", func(t *testing.T) { replayCopiesCommittedOnly(t, kc, brokers) })
	t.Run("lag", func(t *testing.T) { lagCountsRecordsNotMarkers(t, kc, brokers) })
}

// lagCountsRecordsNotMarkers: billing_consumer_lag (Cluster.Lag) counts the
// records a group has yet to receive, not offsets: a group that committed
// after the last record of a transaction is not one behind for the
// transaction's marker, nor behind an aborted transaction's records, which
// no consumer is given; a record still to come counts.
func lagCountsRecordsNotMarkers(t *testing.T, kc *kafkaclient.Cluster, brokers []string) {
	for _, tc := range []struct {
		name      string
		steps     []txnStep
		committed int64 // the group's offset: the one after the last record it was given
		want      int64
	}{
		// p1 0, a1 1, a2 2, marker 3.
		{"a commit marker last", []txnStep{plain(rec("k", "p1")), committed(rec("k", "a1"), rec("k", "a2"))}, 3, 0},
		// p1 0, b1 1, b2 2, marker 3.
		{"an aborted transaction last", []txnStep{plain(rec("k", "p1")), aborted(rec("k", "b1"), rec("k", "b2"))}, 1, 0},
		// p1 0, a1 1, marker 2, p2 3: p2 is still to come.
		{"a record after a marker", []txnStep{plain(rec("k", "p1")), committed(rec("k", "a1")), plain(rec("k", "p2"))}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic, group := kafkatest.UniqueName(t, "txn.lag"), kafkatest.UniqueName(t, "g")
			kafkatest.CreateTopics(t, brokers, 1, topic)
			produceSteps(t, brokers, topic, tc.steps...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl, done := kc.Client()
			defer done()
			// A new broker answers "not coordinator" until it has loaded
			// the offsets topic.
			var last error
			poll.Until(t, "the group's offset committed", 20*time.Second, func() bool {
				res, err := cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: group, GenerationID: -1,
					Topics: map[string][]kafkago.OffsetCommit{topic: {{Partition: 0, Offset: tc.committed}}}})
				if err == nil {
					for _, p := range res.Topics[topic] {
						err = errors.Join(err, p.Error)
					}
				}
				last = err
				return err == nil
			})
			if last != nil {
				t.Fatalf("commit: %v", last)
			}
			lag, err := kc.Lag(ctx, group, topic)
			if err != nil || lag[0] != tc.want {
				t.Errorf("Lag = %v, %v; want partition 0 at %d", lag, err, tc.want)
			}
		})
	}
}

// readerSkipsAbortedAndMarkers: the reader billing builds sees the committed
// records in order and nothing else, also when the partition ends with an
// aborted transaction that a later record follows.
func readerSkipsAbortedAndMarkers(t *testing.T, kc *kafkaclient.Cluster, brokers []string) {
	topic := kafkatest.UniqueName(t, "txn.reader")
	kafkatest.CreateTopics(t, brokers, 1, topic)
	produceSteps(t, brokers, topic,
		plain(rec("k", "p1")), committed(rec("k", "a1"), rec("k", "a2")), plain(rec("k", "p2")),
		aborted(rec("k", "b1"), rec("k", "b2")), plain(rec("k", "p3")), committed(rec("k", "c")),
		aborted(rec("k", "b3")), plain(rec("k", "z")))
	r := kafkago.NewReader(kc.ReaderConfig(topic, kafkatest.UniqueName(t, "g"), kafkatest.FastReaderOptions()))
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []string
	for !slices.Contains(got, "z") {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("fetch after %q: %v", got, err)
		}
		got = append(got, string(m.Value))
	}
	if want := []string{"p1", "a1", "a2", "p2", "p3", "c", "z"}; !slices.Equal(got, want) {
		t.Errorf("read %q, want %q (no aborted record, no marker)", got, want)
	}
}

// replayCopiesCommittedOnly: dlq replay copies the committed and plain DLQ
// records only, also when the DLQ ends with an abort marker.
func replayCopiesCommittedOnly(t *testing.T, kc *kafkaclient.Cluster, brokers []string) {
	dlq, target := kafkatest.UniqueName(t, "txn.dlq"), kafkatest.UniqueName(t, "txn.replayed")
	kafkatest.CreateTopics(t, brokers, 1, dlq, target)
	produceSteps(t, brokers, dlq,
		plain(rec("k", "d0")), committed(rec("k", "d1")), aborted(rec("k", "e1")),
		committed(rec("k", "d2"), rec("k", "d3")), aborted(rec("k", "e2")))
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := replay.Run(ctx, kc, dlq, target, replay.Options{DryRun: true}, log); err != nil || n != 4 {
		t.Errorf("dry run: %d, %v; want 4", n, err)
	}
	if n, err := replay.Run(ctx, kc, dlq, target, replay.Options{}, log); err != nil || n != 4 {
		t.Fatalf("replay: %d, %v; want 4", n, err)
	}
	var got []string
	for _, m := range kafkatest.ReadAll(t, brokers, target, 4, 10*time.Second) {
		got = append(got, string(m.Value))
	}
	if want := []string{"d0", "d1", "d2", "d3"}; !slices.Equal(got, want) {
		t.Errorf("replayed %q, want %q", got, want)
	}
}
