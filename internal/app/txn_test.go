package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// replayed is kafkain.Replay's count of the records it replayed.
func replayed(ctx context.Context, kc *kafkaclient.Cluster, dlq, topic string, o kafkain.ReplayOptions, log *slog.Logger) (int, error) {
	r, err := kafkain.Replay(ctx, kc, dlq, topic, o, log)
	return r.Replayed, err
}

func rec(key, value string) kafkago.Message {
	return kafkago.Message{Key: []byte(key), Value: []byte(value)}
}
func keyed(key string, m kafkago.Message) kafkago.Message { m.Key = []byte(key); return m }

// TestTransactionsRealBroker: records of aborted transactions are never
// read, billed or replayed, and transaction markers never reach the
// application (docs/interface.md §4), on the real broker, whose
// transactions are the ones that matter.
func TestTransactionsRealBroker(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.SharedReal(t).Brokers()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "txn-test"})
	if err != nil {
		t.Fatal(err)
	}

	// The service bills the committed orders and the plain ones, never the
	// aborted one, and routes nothing to the DLQ. All records share one
	// key, so one partition: once the last plain record is billed, the
	// consumer is past the aborted transaction and both its markers.
	t.Run("service", func(t *testing.T) {
		h := newRealHarness(t, brokers)
		ev := func(id string) kafkago.Message { _, m := event(t, id, "cus-txn", 1000); return keyed("k", m) }
		kafkatest.ProduceSteps(t, brokers, h.cfg.KafkaTopic,
			kafkatest.Plain(ev("ord-p1")), kafkatest.Committed(ev("ord-a")), kafkatest.Plain(ev("ord-p2")), kafkatest.Aborted(ev("ord-b")),
			kafkatest.Plain(ev("ord-p3")), kafkatest.Committed(ev("ord-c")), kafkatest.Plain(ev("ord-p4")))
		for _, id := range []string{"ord-p1", "ord-a", "ord-p2", "ord-p3", "ord-c", "ord-p4"} {
			h.waitInvoice(id, order.StatusCharged)
		}
		// An event's outcome is counted once its settle has returned, a
		// moment after the invoice reads charged.
		poll.Until(t, "six events charged", 20*time.Second, func() bool { return h.outcome("charged") >= 6 })
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
// database, gateway stub, consumer group and topics.
func newRealHarness(t *testing.T, brokers []string, mutate ...func(*config.Config)) *harness {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	gw := gatewaystub.New(gatewaystub.Options{})
	url := gw.StartTest(t)
	cfg := testConfig(brokers, dsn, url)
	// The broker may be shared (kafkatest.SharedReal): every name is the
	// test's own.
	cfg.KafkaTopic = kafkatest.UniqueName(t, "orders")
	cfg.KafkaGroupID = kafkatest.UniqueName(t, "billing")
	cfg.KafkaRetryTopicPrefix = kafkatest.UniqueName(t, "retry")
	cfg.KafkaDLQTopic = kafkatest.UniqueName(t, "dlq")
	cfg.KafkaInvoiceTopic = kafkatest.UniqueName(t, "invoices")
	for _, m := range mutate {
		m(&cfg)
	}
	kafkatest.CreateTopics(t, brokers, 3, cfg.KafkaTopic)
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: postgres.NewStore(pool), gw: gw, brokers: brokers, cfg: cfg}
	h.start()
	t.Cleanup(h.shutdown)
	return h
}

// TestTransactionsKfake is the replay and lag cases on the in-process
// broker, which implements transactions too: quicker, and a second broker
// implementation of the markers and the aborted-transaction list.
func TestTransactionsKfake(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.NewFake(t).Brokers()
	kc, err := kafkaclient.NewCluster(kafkaclient.Settings{Brokers: brokers, ClientID: "txn-test"})
	if err != nil {
		t.Fatal(err)
	}
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
		steps     []kafkatest.TxnStep
		committed int64 // the group's offset: the one after the last record it was given
		want      int64
	}{
		// p1 0, a1 1, a2 2, marker 3.
		{"a commit marker last", []kafkatest.TxnStep{kafkatest.Plain(rec("k", "p1")), kafkatest.Committed(rec("k", "a1"), rec("k", "a2"))}, 3, 0},
		// p1 0, b1 1, b2 2, marker 3.
		{"an aborted transaction last", []kafkatest.TxnStep{kafkatest.Plain(rec("k", "p1")), kafkatest.Aborted(rec("k", "b1"), rec("k", "b2"))}, 1, 0},
		// p1 0, a1 1, marker 2, p2 3: p2 is still to come.
		{"a record after a marker", []kafkatest.TxnStep{kafkatest.Plain(rec("k", "p1")), kafkatest.Committed(rec("k", "a1")), kafkatest.Plain(rec("k", "p2"))}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic, group := kafkatest.UniqueName(t, "txn.lag"), kafkatest.UniqueName(t, "g")
			kafkatest.CreateTopics(t, brokers, 1, topic)
			kafkatest.ProduceSteps(t, brokers, topic, tc.steps...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr := &kafkago.Transport{DialTimeout: 10 * time.Second}
			defer tr.CloseIdleConnections()
			cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Transport: tr}
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

// replayCopiesCommittedOnly: dlq replay copies the committed and plain DLQ
// records only, also when the DLQ ends with an abort marker.
func replayCopiesCommittedOnly(t *testing.T, kc *kafkaclient.Cluster, brokers []string) {
	dlq, target := kafkatest.UniqueName(t, "txn.dlq"), kafkatest.UniqueName(t, "txn.replayed")
	kafkatest.CreateTopics(t, brokers, 1, dlq, target)
	kafkatest.ProduceSteps(t, brokers, dlq,
		kafkatest.Plain(rec("k", "d0")), kafkatest.Committed(rec("k", "d1")), kafkatest.Aborted(rec("k", "e1")),
		kafkatest.Committed(rec("k", "d2"), rec("k", "d3")), kafkatest.Aborted(rec("k", "e2")))
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n, err := replayed(ctx, kc, dlq, target, kafkain.ReplayOptions{DryRun: true}, log); err != nil || n != 4 {
		t.Errorf("dry run: %d, %v; want 4", n, err)
	}
	if n, err := replayed(ctx, kc, dlq, target, kafkain.ReplayOptions{}, log); err != nil || n != 4 {
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
