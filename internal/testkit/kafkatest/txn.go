package kafkatest

import (
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TxnStep is one write of a test stream: plain records, or records in a
// producer transaction that is committed or aborted ([ProduceSteps]).
type TxnStep struct {
	txn    bool
	commit bool
	recs   []kafkago.Message
}

// Plain is a step of records written outside any transaction.
func Plain(ms ...kafkago.Message) TxnStep { return TxnStep{recs: ms} }

// Committed is a step of records written in a transaction then committed.
func Committed(ms ...kafkago.Message) TxnStep { return TxnStep{txn: true, commit: true, recs: ms} }

// Aborted is a step of records written in a transaction then aborted.
func Aborted(ms ...kafkago.Message) TxnStep { return TxnStep{txn: true, recs: ms} }

// ProduceSteps writes the steps to topic in order, the transactional ones
// with franz-go's transactional producer (kafka-go has none), the plain ones
// with a plain franz-go producer, each acknowledged before the next. The
// broker writes a transaction's marker after EndTransaction returns, so the
// next step waits for it: with every record of a step in one partition, the
// topic's offsets then hold the records and markers in the order of the
// steps.
func ProduceSteps(t testing.TB, brokers []string, topic string, steps ...TxnStep) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	txnCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(UniqueName(t, "txn")), kgo.RequiredAcks(kgo.AllISRAcks()))
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
				t.Fatalf("kafkatest: step %d: begin transaction: %v", i, err)
			}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("kafkatest: step %d: produce: %v", i, err)
		}
		if s.txn {
			end := kgo.TryAbort
			if s.commit {
				end = kgo.TryCommit
			}
			if err := cl.EndTransaction(ctx, end); err != nil {
				t.Fatalf("kafkatest: step %d: end transaction (commit %v): %v", i, s.commit, err)
			}
			offsets++ // the marker
		}
		offsets += int64(len(rs))
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		var last error
		ok := poll(wctx, func() bool {
			ends, err := endOffsets(wctx, brokers, topic)
			if last = err; err != nil {
				return false
			}
			var n int64
			for _, end := range ends {
				n += end
			}
			return n == offsets
		})
		wcancel()
		if !ok {
			t.Fatalf("kafkatest: step %d: records and marker not written to %s (last error: %v)", i, topic, last)
		}
	}
}
