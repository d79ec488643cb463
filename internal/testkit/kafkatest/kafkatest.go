// Package kafkatest gives tests a real Kafka protocol peer and the small
// client helpers they keep rewriting: create topics, write keyed records,
// read a topic back, and look at committed and end offsets.
//
// Two kinds of cluster stand behind the same [Cluster] type:
//
//   - [NewFake] starts an in-process kfake cluster (franz-go's fake broker).
//     It starts in milliseconds, supports SASL and TLS, and is what most
//     tests should use.
//   - [NewReal] and [SharedReal] start a real Apache Kafka broker (KRaft) from
//     the jars that scripts/kafka.sh fetches. They skip the test when the jars
//     are missing, unless BILLING_E2E=1, where that is a failure.
//
// The package-level helpers ([CreateTopics], [NewWriter], [ReadAll],
// [CommittedOffsets], [EndOffsets], [WaitCommitted]) speak plaintext without
// authentication; for a cluster started with [WithSASL] or [WithTLS] build
// clients from [Cluster.Dialer] and [Cluster.Transport]. [FastReaderConfig]
// is a group reader configuration that keeps tests fast ([FastReaderOptions]
// the same timings for the service run in process), [UniqueName] keeps
// tests that share a broker apart, and [Main] is the TestMain of a package
// that uses [SharedReal] (it also runs goleak). [ProduceSteps] writes plain
// records and committed or aborted transactions in order, and
// [MessageWriter] is a kafka-go writer that writes infra/kafka's messages,
// for tests that route through a writer they tune.
package kafkatest

import (
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/acme/billing/internal/testkit/kafkabroker"
)

// Cluster is a running Kafka cluster, fake or real, owned by a test.
type Cluster struct {
	brokers []string
	mech    sasl.Mechanism
	fake    *kfake.Cluster
	real    *kafkabroker.Broker // a broker of its own (NewReal), nil otherwise
}

// Brokers returns the cluster's bootstrap addresses as host:port.
func (c *Cluster) Brokers() []string { return append([]string(nil), c.brokers...) }

// Fake returns the underlying kfake cluster, for tests that inject faults
// (ControlKey, MoveTopicPartition, ...); it is nil for a real broker.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Dialer returns a kafka-go dialer that authenticates with the cluster's SASL
// user, if any, and speaks TLS with clientTLS when it is not nil (see
// [ClientTLS]). Use it for kafkago.ReaderConfig.Dialer and kafkago.DialContext.
func (c *Cluster) Dialer(clientTLS *tls.Config) *kafkago.Dialer {
	return &kafkago.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: clientTLS, SASLMechanism: c.mech}
}

// Transport returns a kafka-go transport with the same security as
// [Cluster.Dialer], for a kafkago.Writer or kafkago.Client. Its idle connections
// are closed when the test ends.
func (c *Cluster) Transport(t testing.TB, clientTLS *tls.Config) *kafkago.Transport {
	t.Helper()
	tr := &kafkago.Transport{DialTimeout: 10 * time.Second, TLS: clientTLS, SASL: c.mech}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// Option configures [NewFake].
type Option func(*fakeConfig)

type fakeConfig struct {
	opts []kfake.Opt
	mech sasl.Mechanism
	err  error
}

// WithTopics creates topics with the given number of partitions when the
// cluster starts. It may be given several times.
func WithTopics(partitions int, topics ...string) Option {
	return func(c *fakeConfig) {
		c.opts = append(c.opts, kfake.SeedTopics(int32(partitions), topics...))
	}
}

// WithSASL makes the cluster require SASL and creates user with password
// under mechanism: "plain", "scram-sha-256" or "scram-sha-512" (any case, as
// in BILLING_KAFKA_SASL_MECHANISM). [Cluster.Dialer] and [Cluster.Transport]
// then authenticate as that user.
func WithSASL(mechanism, user, pass string) Option {
	return func(c *fakeConfig) {
		method, mech, err := saslMechanism(mechanism, user, pass)
		if err != nil {
			c.err = err
			return
		}
		c.mech = mech
		c.opts = append(c.opts, kfake.EnableSASL(), kfake.Superuser(method, user, pass))
	}
}

// WithTLS makes the cluster listen with TLS using server, for instance the
// configuration [SelfSignedTLS] returns.
func WithTLS(server *tls.Config) Option {
	return func(c *fakeConfig) { c.opts = append(c.opts, kfake.TLS(server)) }
}

// WithMaxMessageBytes sets the broker's message.max.bytes, the most a batch
// may take on the wire (1 MiB by default, as Kafka's): a compressed batch of
// tens of megabytes of zeros takes more in some codecs (snappy compresses
// zeros about 20 times).
func WithMaxMessageBytes(n int) Option {
	return WithKfake(kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(n)}))
}

// WithKfake passes options straight to kfake.NewCluster.
func WithKfake(opts ...kfake.Opt) Option {
	return func(c *fakeConfig) { c.opts = append(c.opts, opts...) }
}

// NewFake starts an in-process kfake cluster of one broker on 127.0.0.1 and
// closes it when the test ends. Group timeouts are short, so that readers
// from [FastReaderConfig] join and rebalance in milliseconds; topics are
// not created on demand (use [WithTopics] or [CreateTopics]).
func NewFake(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cfg := fakeConfig{opts: []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.DefaultNumPartitions(1),
	}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		t.Fatalf("kafkatest: %v", cfg.err)
	}
	fc, err := kfake.NewCluster(cfg.opts...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake cluster: %v", err)
	}
	t.Cleanup(fc.Close)
	return &Cluster{brokers: fc.ListenAddrs(), mech: cfg.mech, fake: fc}
}

// saslMechanism maps a mechanism name to kfake's method name and a kafka-go
// client mechanism.
func saslMechanism(name, user, pass string) (string, sasl.Mechanism, error) {
	switch strings.ToLower(name) {
	case "plain":
		return "PLAIN", plain.Mechanism{Username: user, Password: pass}, nil
	case "scram-sha-256":
		m, err := scram.Mechanism(scram.SHA256, user, pass)
		return "SCRAM-SHA-256", m, err
	case "scram-sha-512":
		m, err := scram.Mechanism(scram.SHA512, user, pass)
		return "SCRAM-SHA-512", m, err
	default:
		return "", nil, fmt.Errorf("unknown SASL mechanism %q (want plain, scram-sha-256 or scram-sha-512)", name)
	}
}
