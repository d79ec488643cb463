package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// errNoBroker marks a real broker that cannot start because the machine
// lacks what it needs (jars or java): a skip, unless BILLING_E2E=1.
var errNoBroker = errors.New("no real Kafka broker")

// realBroker is a broker started by scripts/kafka.sh from a data directory.
type realBroker struct {
	script string
	dir    string
	addr   string
	log    string // what kafka.sh start printed
}

// NewReal starts a real Apache Kafka broker (single node, KRaft) on a free
// loopback port with scripts/kafka.sh, in a temporary directory, and stops it
// when the test ends. Start-up takes about 4 s; tests of one package that can
// share a broker should use [SharedReal].
//
// Without the broker jars the test is skipped, or fails when BILLING_E2E=1.
func NewReal(t testing.TB) *Cluster {
	t.Helper()
	b, err := startReal(t.TempDir())
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Log(b.log)
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Errorf("kafkatest: %v", err)
		}
	})
	return &Cluster{brokers: []string{b.addr}}
}

// shared is the broker SharedReal starts once per test binary; [Main] or
// [StopShared] stops it.
var shared struct {
	once   sync.Once
	mu     sync.Mutex
	broker *realBroker
	dir    string
	err    error
}

// SharedReal returns a real broker shared by every test of the test binary,
// starting it on first use. Tests sharing it must use their own topic and
// group names. The package's TestMain should call [Main] (or [StopShared]
// after m.Run) to stop it; if it does not, the broker is killed shortly after
// the test binary exits.
//
// Without the broker jars the test is skipped, or fails when BILLING_E2E=1.
func SharedReal(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.dir, shared.err = os.MkdirTemp("", "kafkatest-")
		if shared.err == nil {
			shared.broker, shared.err = startReal(shared.dir)
		}
		if shared.err == nil {
			t.Log(shared.broker.log)
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
	return &Cluster{brokers: []string{shared.broker.addr}}
}

// StopShared stops the broker [SharedReal] started, if any, and removes its
// directory.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	var err error
	if shared.broker != nil {
		err = shared.broker.stop()
		shared.broker = nil
	}
	if shared.dir != "" {
		err = errors.Join(err, os.RemoveAll(shared.dir))
		shared.dir = ""
	}
	return err
}

// Main runs the tests of a package, stops the shared broker, then fails the
// run if goroutines leaked (goleak, with leakOpts), and exits. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
func Main(m *testing.M, leakOpts ...goleak.Option) {
	code := m.Run()
	if err := StopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: stop shared broker: %v\n", err)
		code = 1
	}
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
	if errors.Is(err, errNoBroker) && os.Getenv("BILLING_E2E") != "1" {
		t.Skipf("kafkatest: %v (set BILLING_E2E=1 to make this a failure)", err)
	}
	t.Fatalf("kafkatest: %v", err)
}

// startReal runs scripts/kafka.sh start in dir on free ports.
func startReal(dir string) (*realBroker, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, "scripts", "kafka.sh")
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("%w: java not found (scripts/deps.sh installs it)", errNoBroker)
	}
	if out, err := exec.Command("bash", script, "libs").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: %s", errNoBroker, bytes.TrimSpace(out))
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "start", dir, strconv.Itoa(ports[0]), strconv.Itoa(ports[1]))
	// The watchdog in kafka.sh kills the broker if this process dies
	// before its cleanup runs (a panic, or go test's -timeout).
	cmd.Env = append(os.Environ(), "KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("start broker: %v\n%s", err, out)
	}
	return &realBroker{script: script, dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), log: string(out)}, nil
}

func (b *realBroker) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", b.script, "stop", b.dir)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stop broker in %s: %v\n%s", b.dir, err, out)
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
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
