package kafkatest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/acme/billing/internal/testkit/kafkabroker"
	"github.com/acme/billing/internal/testkit/needs"
)

// NewReal starts a real Apache Kafka broker (single node, KRaft) on a free
// loopback port with scripts/kafka.sh, in a temporary directory, and stops it
// when the test ends. Start-up takes about 4 s; tests of one package that can
// share a broker should use [SharedReal].
//
// Without the broker jars the test is skipped, or fails when BILLING_E2E=1;
// with -short it is skipped (package needs).
func NewReal(t testing.TB) *Cluster {
	t.Helper()
	needs.External(t, "a real Kafka broker")
	b, err := startReal(t.TempDir())
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Log(b.Log)
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("kafkatest: %v", err)
		}
	})
	return &Cluster{brokers: []string{b.Addr()}, real: b}
}

// StopBroker stops the real broker of a cluster from [NewReal] (a
// controlled shutdown) and waits for it to exit; [Cluster.RestartBroker]
// starts it again. The test fails at once for any other cluster.
func (c *Cluster) StopBroker(t testing.TB) {
	t.Helper()
	if c.real == nil {
		t.Fatal("kafkatest: StopBroker needs a cluster of its own from NewReal")
	}
	if err := c.real.Stop(); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
}

// RestartBroker starts the broker StopBroker stopped, on the same address
// and from the same data, and waits until it is up.
func (c *Cluster) RestartBroker(t testing.TB) {
	t.Helper()
	if c.real == nil {
		t.Fatal("kafkatest: RestartBroker needs a cluster of its own from NewReal")
	}
	if err := c.real.Restart(); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Log(c.real.Log)
}

// shared is the broker SharedReal starts once per test binary; [Main] or
// [StopShared] stops it.
var shared struct {
	once   sync.Once
	mu     sync.Mutex
	broker *kafkabroker.Broker
	dir    string
	err    error
}

// SharedReal returns a real broker shared by every test of the test binary,
// starting it on first use. Tests sharing it must use their own topic and
// group names. The package's TestMain should call [Main] (or [StopShared]
// after m.Run) to stop it; if it does not, the broker is killed shortly after
// the test binary exits.
//
// Without the broker jars the test is skipped, or fails when BILLING_E2E=1;
// with -short it is skipped (package needs).
func SharedReal(t testing.TB) *Cluster {
	t.Helper()
	needs.External(t, "a real Kafka broker")
	shared.once.Do(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.dir, shared.err = os.MkdirTemp("", "kafkatest-") //nolint:usetesting // the broker outlives this test: every test of the binary shares it, StopShared removes it
		if shared.err == nil {
			shared.broker, shared.err = startReal(shared.dir)
		}
		if shared.err == nil {
			t.Log(shared.broker.Log)
		}
	})
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.err != nil {
		skipOrFatal(t, shared.err)
	}
	if shared.broker == nil {
		t.Fatal("kafkatest: SharedReal called after StopShared")
	}
	return &Cluster{brokers: []string{shared.broker.Addr()}}
}

// StopShared stops the broker [SharedReal] started, if any, and removes its
// directory.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	var err error
	if shared.broker != nil {
		err = shared.broker.Stop()
		shared.broker = nil
	}
	if shared.dir != "" {
		err = errors.Join(err, os.RemoveAll(shared.dir))
		shared.dir = ""
	}
	return err
}

// AfterShared stops the shared broker after a TestMain's m.Run (or
// pgtest.Run) and returns the run's exit code, or 1 if the broker did not
// stop cleanly.
func AfterShared(code int) int {
	if err := StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: stop shared broker: %v\n", err)
		return 1
	}
	return code
}

// Main runs the tests of a package, stops the shared broker, then fails the
// run if goroutines leaked (goleak, with leakOpts), and exits. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
func Main(m *testing.M, leakOpts ...goleak.Option) {
	code := AfterShared(m.Run())
	if code == 0 {
		if err := goleak.Find(leakOpts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, kafkabroker.ErrUnavailable) {
		needs.Missing(t, fmt.Errorf("kafkatest: %w", err))
	}
	t.Fatalf("kafkatest: %v", err)
}

// startReal starts a broker in dir with the repository's scripts/kafka.sh.
func startReal(dir string) (*kafkabroker.Broker, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	return kafkabroker.Start(root, dir)
}

// repoRoot walks up from the working directory (a package directory under
// go test) to the directory holding go.mod and scripts/kafka.sh.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "scripts", "kafka.sh")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod with scripts/kafka.sh above the working directory")
		}
		dir = parent
	}
}
