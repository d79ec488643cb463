// Package stripemock starts stripe-mock, Stripe's own mock of its API
// (github.com/stripe/stripe-mock, Version), on a free loopback port for
// tests: every request the Stripe adapter sends is validated against
// Stripe's OpenAPI specification, with -strict-version-check so that a
// Stripe-Version other than the one the specification describes is refused
// too. stripe-mock stores nothing: it answers each valid request with a
// fixture, so what depends on state (idempotency, declines, lists of what
// was charged) is tested against internal/testkit/gatewaystub instead.
//
// The binary is built by scripts/deps.sh (check stripemock) into
// $BILLING_CACHE_DIR/stripe-mock-<Version>/ (BILLING_CACHE_DIR defaults to
// /var/cache/billing); BILLING_STRIPE_MOCK names another. Without it a test
// is skipped, or fails when BILLING_E2E=1. Production code does not import
// this package.
package stripemock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/pgcluster"
)

// Version is the stripe-mock release the tests run, and the one
// scripts/deps.sh builds.
const Version = "v0.203.0"

// APIKey is a key stripe-mock accepts ("any valid looking testmode secret
// API key").
const APIKey = "sk_test_billing"

// startTimeout bounds the wait for stripe-mock to listen: it loads an 8 MB
// OpenAPI specification first.
const startTimeout = 60 * time.Second

// ErrUnavailable is wrapped by Start's error when the binary is missing.
var ErrUnavailable = errors.New("stripe-mock not installed (scripts/deps.sh stripemock)")

// Server is one running stripe-mock.
type Server struct {
	// URL is its HTTP base URL, http://127.0.0.1:PORT.
	URL string

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	mu      sync.Mutex
	out     strings.Builder
}

// Binary returns the path of the stripe-mock binary: BILLING_STRIPE_MOCK,
// or where scripts/deps.sh puts it.
func Binary() string {
	if p := os.Getenv("BILLING_STRIPE_MOCK"); p != "" {
		return p
	}
	cache := os.Getenv("BILLING_CACHE_DIR")
	if cache == "" {
		cache = "/var/cache/billing"
	}
	return filepath.Join(cache, "stripe-mock-"+Version, "stripe-mock")
}

var listeningRE = regexp.MustCompile(`Listening for HTTP at address: (127\.0\.0\.1:[0-9]+)`)

// Start runs stripe-mock on free loopback ports (its HTTPS listener too,
// which no test uses: stripe-mock opens one on 12112 of every interface
// unless told where) and waits until it listens.
func Start() (*Server, error) {
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, bin)
	}
	s := &Server{exited: make(chan struct{})}
	cmd := exec.Command(bin, "-strict-version-check", "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0") //nolint:noctx // it outlives the call that started it; Stop ends it
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	// A killed test binary takes it along (the parent-death signal is
	// tied to the thread that started it: StartTied locks one).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.cmd = cmd
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			if s.out.Len() < 64<<10 {
				s.out.WriteString(line + "\n")
			}
			s.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	if err := pgcluster.StartTied(cmd, s.exited, &s.waitErr, nil); err != nil {
		_ = pw.Close()
		return nil, fmt.Errorf("stripemock: run %s: %w", bin, err)
	}
	go func() {
		<-s.exited
		_ = pw.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	select {
	case a := <-addr:
		s.URL = "http://" + a
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("stripemock: exited (%w) before listening:\n%s", s.waitErr, s.Output())
	case <-ctx.Done():
		_ = s.Stop()
		return nil, fmt.Errorf("stripemock: not listening within %v:\n%s", startTimeout, s.Output())
	}
}

// Output returns what stripe-mock printed so far (its first 64 KiB).
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Stop ends stripe-mock and waits for it.
func (s *Server) Stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stripemock: signal: %w", err)
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	return errors.New("stripemock: did not exit on SIGTERM; killed")
}

// StartTest is Start for one test: it stops stripe-mock when t ends, and
// skips t without the binary (fails it when BILLING_E2E=1).
func StartTest(t testing.TB) *Server {
	t.Helper()
	needs.External(t, "stripe-mock")
	s, err := Start()
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

// shared is the server Shared starts once per test binary.
var shared struct {
	once sync.Once
	mu   sync.Mutex
	srv  *Server
	err  error
}

// Shared returns a stripe-mock shared by every test of the test binary
// (stripe-mock keeps no state between requests, so tests cannot disturb
// each other), starting it on first use. The package's TestMain calls
// StopShared after m.Run.
func Shared(t testing.TB) *Server {
	t.Helper()
	needs.External(t, "stripe-mock")
	shared.once.Do(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		shared.srv, shared.err = Start()
	})
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.err != nil {
		skipOrFatal(t, shared.err)
	}
	if shared.srv == nil {
		t.Fatal("stripemock: Shared called after StopShared")
	}
	return shared.srv
}

// StopShared stops the server Shared started, if any.
func StopShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil {
		return nil
	}
	err := shared.srv.Stop()
	shared.srv = nil
	return err
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) {
		needs.Missing(t, err)
	}
	t.Fatalf("%v", err)
}
