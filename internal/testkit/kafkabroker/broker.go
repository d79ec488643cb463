// Package kafkabroker runs a real Apache Kafka broker (single node, KRaft)
// with scripts/kafka.sh, for the tests (internal/testkit/kafkatest) and `make bench`.
package kafkabroker

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
	"strings"
	"time"

	"github.com/acme/billing/internal/testkit/freeport"
)

// ErrUnavailable marks a broker that cannot start because the machine lacks
// what it needs (the jars, or java).
var ErrUnavailable = errors.New("no real Kafka broker")

// Broker is a broker started by scripts/kafka.sh from a data directory.
type Broker struct {
	script string
	dir    string
	addr   string
	ports  [2]int // broker, controller
	// Log is what kafka.sh start printed.
	Log string
	// Version is the directory of the jars, e.g. "kafka-4.1.1".
	Version string
}

// Start starts a broker with root/scripts/kafka.sh in dir, on free loopback
// ports. kafka.sh's watchdog stops it if this process dies before Stop.
func Start(root, dir string) (*Broker, error) {
	script := filepath.Join(root, "scripts", "kafka.sh")
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("%w: java not found (scripts/deps.sh installs it)", ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	libs, err := exec.CommandContext(ctx, "bash", script, "libs").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, bytes.TrimSpace(libs))
	}
	// A port free a moment ago can be taken by another test process before
	// the broker binds it: such a start is tried again, on other ports and
	// from an empty directory (the failed start formatted it for the old
	// ones).
	for attempt := 1; ; attempt++ {
		ports, err := freeport.Ports(2)
		if err != nil {
			return nil, err
		}
		b := &Broker{
			script:  script,
			dir:     dir,
			addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			ports:   [2]int{ports[0], ports[1]},
			Version: filepath.Base(filepath.Dir(strings.TrimSpace(string(libs)))),
		}
		err = b.start()
		if err == nil {
			return b, nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
		if err := emptyDir(dir); err != nil {
			return nil, err
		}
	}
}

// emptyDir removes what dir holds, keeping dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// start runs kafka.sh start on b's directory and ports.
func (b *Broker) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", b.script, "start", b.dir, strconv.Itoa(b.ports[0]), strconv.Itoa(b.ports[1]))
	cmd.Env = append(os.Environ(), "KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()))
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("start broker: %w\n%s", err, out)
	}
	b.Log = string(out)
	return nil
}

// Restart starts a broker that Stop stopped, on the same ports and from
// the same data: its topics, records and committed offsets are there
// again, as after a broker restart in production. Its ports lie outside the
// kernel's ephemeral range (see [freeport.Ports]), so no outgoing
// connection can take them while it is down; only another explicit bind
// can, and then Restart fails.
func (b *Broker) Restart() error { return b.start() }

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return b.addr }

// PID is the broker's process id (kafka.sh writes it to kafka.pid), or 0.
func (b *Broker) PID() int {
	raw, err := os.ReadFile(filepath.Join(b.dir, "kafka.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid
}

// Stop stops the broker and waits for it to exit.
func (b *Broker) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", b.script, "stop", b.dir)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stop broker in %s: %w\n%s", b.dir, err, out)
	}
	return nil
}
