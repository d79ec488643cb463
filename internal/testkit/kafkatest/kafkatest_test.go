package kafkatest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/acme/billing/internal/testkit/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// roundTrip writes n keyed records to a new topic of the given partitions,
// consumes them with a group through FetchMessage/CommitMessages, and checks
// what a consumer of this service relies on: every record arrives once, keys
// stay on one partition, and the committed offsets reach the end offsets.
func roundTrip(t *testing.T, brokers []string, partitions, n int) {
	t.Helper()
	topic, group := kafkatest.UniqueName(t, "orders"), kafkatest.UniqueName(t, "billing")
	kafkatest.CreateTopics(t, brokers, partitions, topic)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := kafkatest.NewWriter(t, brokers, topic)
	msgs := make([]kafkago.Message, n)
	for i := range msgs {
		// 10 orders, several events each: the key decides the partition.
		msgs[i] = kafkago.Message{Key: fmt.Appendf(nil, "ord-%d", i%10), Value: fmt.Appendf(nil, "event-%d", i)}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}

	ends := kafkatest.EndOffsets(t, brokers, topic)
	if len(ends) != partitions {
		t.Fatalf("end offsets of %d partitions, want %d: %v", len(ends), partitions, ends)
	}
	var total int64
	for _, e := range ends {
		total += e
	}
	if total != int64(n) {
		t.Fatalf("end offsets add up to %d, want %d: %v", total, n, ends)
	}

	r := kafkago.NewReader(kafkatest.FastReaderConfig(brokers, group, topic))
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("close reader: %v", err)
		}
	}()
	seen := make(map[string]int)         // value -> times
	keyPartition := make(map[string]int) // key -> partition
	for range n {
		m, err := r.FetchMessage(ctx)
		// A broker just started may still be loading the group's
		// coordinator state: kafka-go hands that back, marked temporary.
		for kerr := kafkago.Error(0); errors.As(err, &kerr) && kerr.Temporary(); {
			m, err = r.FetchMessage(ctx)
		}
		if err != nil {
			t.Fatalf("fetch after %d records: %v", len(seen), err)
		}
		seen[string(m.Value)]++
		if p, ok := keyPartition[string(m.Key)]; ok && p != m.Partition {
			t.Errorf("key %s on partitions %d and %d", m.Key, p, m.Partition)
		}
		keyPartition[string(m.Key)] = m.Partition
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("commit %d/%d: %v", m.Partition, m.Offset, err)
		}
	}
	for i := range n {
		if v := fmt.Sprintf("event-%d", i); seen[v] != 1 {
			t.Errorf("%s consumed %d times, want 1", v, seen[v])
		}
	}

	committed := kafkatest.WaitCommitted(t, brokers, group, topic, 10*time.Second)
	if got := kafkatest.CommittedOffsets(t, brokers, group, topic); !maps.Equal(got, committed) {
		t.Errorf("CommittedOffsets = %v, WaitCommitted returned %v", got, committed)
	}
	for p, end := range ends {
		if c, ok := committed[p]; end > 0 && (!ok || c != end) {
			t.Errorf("partition %d: committed %d (present %v), end %d", p, c, ok, end)
		}
	}

	all := kafkatest.ReadAll(t, brokers, topic, n, 10*time.Second)
	if len(all) != n {
		t.Fatalf("ReadAll returned %d records, want all %d", len(all), n)
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.Partition > b.Partition || (a.Partition == b.Partition && a.Offset >= b.Offset) {
			t.Fatalf("ReadAll not ordered: %d/%d before %d/%d", a.Partition, a.Offset, b.Partition, b.Offset)
		}
	}
}

func TestFakeRoundTrip(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t)
	roundTrip(t, c.Brokers(), 3, 50)
}

func TestFakeReadAll(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t, kafkatest.WithTopics(2, "t"))
	w := kafkatest.NewWriter(t, c.Brokers(), "t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []kafkago.Message
	for i := range 5 {
		msgs = append(msgs, kafkago.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}

	// Asked for at least 3, it returns all 5 the topic holds (a duplicate
	// left by an at-least-once writer must show).
	got := kafkatest.ReadAll(t, c.Brokers(), "t", 3, 10*time.Second)
	values := map[string]bool{}
	for _, m := range got {
		values[string(m.Value)] = true
	}
	if len(got) != 5 || len(values) != 5 {
		t.Fatalf("ReadAll(3) returned %d records (%d distinct), want all 5", len(got), len(values))
	}

	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		kafkatest.ReadAll(ft, c.Brokers(), "t", 6, 300*time.Millisecond)
	}()
	if !ft.failed {
		t.Fatal("ReadAll(6) of a topic holding 5 records did not fail")
	}
}

func TestFakeSeededTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.NewFake(t, kafkatest.WithTopics(4, "seeded"))
	if got := kafkatest.EndOffsets(t, c.Brokers(), "seeded"); !maps.Equal(got, map[int]int64{0: 0, 1: 0, 2: 0, 3: 0}) {
		t.Fatalf("EndOffsets of a new seeded topic = %v", got)
	}
	if got := kafkatest.CommittedOffsets(t, c.Brokers(), "nobody", "seeded"); len(got) != 0 {
		t.Fatalf("CommittedOffsets of an unknown group = %v, want none", got)
	}
	// CreateTopics accepts a topic that already exists with that many partitions.
	kafkatest.CreateTopics(t, c.Brokers(), 4, "seeded")
}

func TestFakeSecure(t *testing.T) {
	t.Parallel()
	caFile, serverTLS := kafkatest.SelfSignedTLS(t)
	for _, mech := range []string{"plain", "scram-sha-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.NewFake(t,
				kafkatest.WithTopics(1, "secure"),
				kafkatest.WithSASL(mech, "billing", "s3cret"),
				kafkatest.WithTLS(serverTLS))
			clientTLS := kafkatest.ClientTLS(t, caFile)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			w := kafkatest.NewWriter(t, c.Brokers(), "secure")
			w.Transport = c.Transport(t, clientTLS)
			if err := w.WriteMessages(ctx, kafkago.Message{Key: []byte("k"), Value: []byte("v")}); err != nil {
				t.Fatalf("write over TLS with SASL %s: %v", mech, err)
			}

			cfg := kafkatest.FastReaderConfig(c.Brokers(), "g", "secure")
			cfg.Dialer = c.Dialer(clientTLS)
			r := kafkago.NewReader(cfg)
			defer r.Close()
			m, err := r.FetchMessage(ctx)
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			if string(m.Value) != "v" {
				t.Fatalf("fetched %q, want v", m.Value)
			}

			// The cluster does enforce both: no TLS, or a wrong password, is refused.
			plainConn, err := kafkago.DialContext(ctx, "tcp", c.Brokers()[0])
			if err == nil {
				_, err = plainConn.ApiVersions()
				plainConn.Close()
			}
			if err == nil {
				t.Error("a plaintext client was answered by a TLS cluster")
			}
			d := &kafkago.Dialer{Timeout: 10 * time.Second, TLS: clientTLS, SASLMechanism: mechanism(t, mech, "billing", "wrong")}
			if conn, err := d.DialContext(ctx, "tcp", c.Brokers()[0]); err == nil {
				conn.Close()
				t.Error("a wrong password was accepted")
			}
		})
	}
}

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := kafkatest.UniqueName(t, "x/y z"), kafkatest.UniqueName(t, "x/y z")
	if a == b {
		t.Fatalf("UniqueName returned %q twice", a)
	}
	if !strings.HasPrefix(a, "x_y_z.TestUniqueName.") {
		t.Fatalf("UniqueName = %q, want the prefix and test name with invalid characters replaced", a)
	}
	if long := kafkatest.UniqueName(t, strings.Repeat("a", 300)); len(long) > 249 {
		t.Fatalf("UniqueName gave %d characters, Kafka allows 249", len(long))
	}
}

func TestWithSASLRejectsUnknownMechanism(t *testing.T) {
	t.Parallel()
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		kafkatest.NewFake(ft, kafkatest.WithSASL("gssapi", "u", "p"))
	}()
	if !ft.failed {
		t.Fatal("NewFake accepted SASL mechanism gssapi")
	}
}

// fatalRecorder turns Fatalf into a recorded failure and a panic, so a test
// can check that a helper rejects bad input.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed = true
	panic(errors.New("fatal"))
}

func mechanism(t *testing.T, name, user, pass string) sasl.Mechanism {
	t.Helper()
	var algo scram.Algorithm
	switch strings.ToLower(name) {
	case "plain":
		return plain.Mechanism{Username: user, Password: pass}
	case "scram-sha-256":
		algo = scram.SHA256
	case "scram-sha-512":
		algo = scram.SHA512
	}
	m, err := scram.Mechanism(algo, user, pass)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
