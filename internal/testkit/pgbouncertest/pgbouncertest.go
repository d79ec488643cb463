// Package pgbouncertest starts a throwaway PgBouncer in transaction pool
// mode in front of a test Postgres, so tests can run billing the way a
// production deployment behind a pooler does (deploy/README.md, "Behind
// PgBouncer"). It needs the pgbouncer binary (Debian's package;
// scripts/deps.sh installs it): without it a test is skipped, or fails
// when BILLING_E2E=1. Production code does not import it.
//
// Clients authenticate to PgBouncer with a password from its auth_file
// (md5); PgBouncer reaches the server as the same user, which the test
// cluster trusts. Run as root, pgbouncer runs as the "postgres" OS user: it
// refuses to run as root.
package pgbouncertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/internal/testkit/freeport"
	"github.com/acme/billing/internal/testkit/needs"
	"github.com/acme/billing/internal/testkit/pgcluster"
)

const (
	// Password is the password every client uses; the auth_file lists it for
	// the upstream DSN's user.
	Password = "bouncer-test"
	// ExecMode is the pgx query exec mode that works through PgBouncer 1.18
	// in transaction mode: no named prepared statements, and each query (or
	// pipelined batch) goes in one round trip ending with one Sync, which
	// PgBouncer keeps on one server connection.
	ExecMode = "exec"
	// startTimeout bounds waiting for PgBouncer to accept connections.
	startTimeout = 30 * time.Second
	// stopTimeout bounds waiting for it to exit before it is killed.
	stopTimeout = 10 * time.Second
)

// IgnoredStartupParameters are the startup parameters billing's pool sends
// (infra/postgres pool.go) that PgBouncer does not track; without them in
// ignore_startup_parameters it refuses the connection.
const IgnoredStartupParameters = "idle_in_transaction_session_timeout"

// Options configures a Bouncer.
type Options struct {
	// PoolSize is default_pool_size: server connections per database and
	// user (20 when 0).
	PoolSize int
	// NoIgnoreStartupParameters leaves ignore_startup_parameters empty, to
	// show what PgBouncer does with billing's startup parameters then.
	NoIgnoreStartupParameters bool
}

// Bouncer is one running PgBouncer.
type Bouncer struct {
	port     int
	upstream *url.URL
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	log      *bytes.Buffer // not read before exited is closed
	upstrDSN string
}

// Start starts PgBouncer in transaction mode in front of the server that
// upstreamDSN (a postgres:// URL, as pgtest.NewDB returns) names, and stops
// it when t ends. Every database of that server is reachable through it.
func Start(t testing.TB, upstreamDSN string, opts Options) *Bouncer {
	t.Helper()
	needs.External(t, "PgBouncer")
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		needs.Missing(t, fmt.Errorf("pgbouncertest: pgbouncer not installed: %w", err))
	}
	up, err := url.Parse(upstreamDSN)
	if err != nil || up.User == nil || up.Hostname() == "" {
		t.Fatal("pgbouncertest: upstream DSN is not a postgres:// URL with a user and host")
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		if cred, err = pgcluster.PostgresCredential(); err != nil {
			t.Fatalf("pgbouncertest: %v", err)
		}
	}
	dir, err := os.MkdirTemp("", "pgbouncertest-") //nolint:usetesting // the postgres user must reach it, and t.TempDir's parent is 0700
	if err != nil {
		t.Fatalf("pgbouncertest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// 0755: the postgres user reads its config from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("pgbouncertest: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// A free port found by listening and closing may be taken again before
	// PgBouncer binds it: try another one then.
	var lastErr error
	for range 3 {
		port, err := freeport.Port()
		if err != nil {
			t.Fatalf("pgbouncertest: %v", err)
		}
		b := &Bouncer{port: port, upstream: up, dir: dir, upstrDSN: upstreamDSN}
		if err := b.writeConfig(opts, cred); err != nil {
			t.Fatalf("pgbouncertest: %v", err)
		}
		if err := b.launch(bin, cred); err != nil {
			t.Fatalf("pgbouncertest: %v", err)
		}
		if lastErr = b.waitReady(ctx); lastErr == nil {
			t.Cleanup(func() {
				if err := b.stop(); err != nil {
					t.Errorf("pgbouncertest: %v", err)
				}
			})
			return b
		}
		_ = b.stop()
		if ctx.Err() != nil {
			break
		}
	}
	t.Fatalf("pgbouncertest: start: %v", lastErr)
	return nil
}

// Port is the port PgBouncer listens on (127.0.0.1).
func (b *Bouncer) Port() int { return b.port }

// DSN returns dsn (a postgres:// URL to the upstream server, for any of its
// databases) pointed at PgBouncer instead: same user and database, the
// auth_file password, and default_query_exec_mode=exec.
func (b *Bouncer) DSN(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		t.Fatal("pgbouncertest: DSN is not a postgres:// URL with a user")
	}
	return b.rewrite(u)
}

// rewrite points u at PgBouncer with the auth_file password and the exec
// mode.
func (b *Bouncer) rewrite(u *url.URL) string {
	u.User = url.UserPassword(u.User.Username(), Password)
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	q := u.Query()
	q.Set("default_query_exec_mode", ExecMode)
	u.RawQuery = q.Encode()
	return u.String()
}

// dsnFor is DSN for waitReady, with a short connect timeout.
func (b *Bouncer) dsnFor(dsn string) string {
	u, _ := url.Parse(dsn) // parsed in Start
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	return b.rewrite(u)
}

// ServerConnections returns how many server connections PgBouncer has open
// to the upstream server right now (its SHOW SERVERS), so a test can show
// that work went through it.
func (b *Bouncer) ServerConnections(ctx context.Context) (int, error) {
	u := *b.upstream
	u.User = url.UserPassword(b.upstream.User.Username(), Password)
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	u.Path = "/pgbouncer"
	u.RawQuery = "sslmode=disable&default_query_exec_mode=simple_protocol"
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		return 0, fmt.Errorf("connect to the pgbouncer admin console: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, "SHOW SERVERS")
	if err != nil {
		return 0, fmt.Errorf("show servers: %w", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	return n, rows.Err()
}

func (b *Bouncer) writeConfig(opts Options, cred *syscall.Credential) error {
	pool := opts.PoolSize
	if pool <= 0 {
		pool = 20
	}
	ignore := IgnoredStartupParameters
	if opts.NoIgnoreStartupParameters {
		ignore = ""
	}
	user := b.upstream.User.Username()
	// "*" forwards every database name to the upstream server, so each
	// test's fresh database is reachable without a config change.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = md5
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 1000
ignore_startup_parameters = %s
; hand server connections out in turn, not last-in first-out: state a
; client leaves on a server connection (a session advisory lock, a named
; prepared statement) then shows up in the next client's transactions, as
; it does in production under load
server_round_robin = 1
logfile = %s
pidfile =
`, b.upstream.Hostname(), b.upstream.Port(), b.port, filepath.Join(b.dir, "userlist.txt"), user, pool, ignore,
		filepath.Join(b.dir, "pgbouncer.log"))
	userlist := fmt.Sprintf("%q %q\n", user, Password)
	for name, body := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": userlist} {
		p := filepath.Join(b.dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if cred != nil {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("chown %s: %w", name, err)
			}
		}
	}
	// The log file is made by pgbouncer; the directory must let it.
	if cred != nil {
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", b.dir, err)
		}
	}
	return nil
}

// launch starts pgbouncer with a parent-death signal, as pgcluster does for
// the postmaster: a killed test binary does not leave it running.
func (b *Bouncer) launch(bin string, cred *syscall.Credential) error {
	b.log = &bytes.Buffer{}
	b.exited = make(chan struct{})
	cmd := exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini")) //nolint:noctx // pgbouncer outlives the call that started it; Stop ends it
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = b.log, b.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	b.cmd = cmd
	if err := pgcluster.StartTied(cmd, b.exited, &b.waitErr, nil); err != nil {
		return fmt.Errorf("run pgbouncer: %w", err)
	}
	return nil
}

// waitReady polls until a query through PgBouncer reaches the upstream
// server, pgbouncer exits, or ctx ends.
func (b *Bouncer) waitReady(ctx context.Context) error {
	dsn := b.dsnFor(b.upstrDSN)
	return pgcluster.PollReady(ctx, "pgbouncer", b.exited, func() error { return b.waitErr }, b.logTail,
		func(ctx context.Context) error { return ping(ctx, dsn) })
}

func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return conn.Ping(ctx)
}

// stop asks pgbouncer for an immediate shutdown (SIGTERM) and waits; it
// kills it if it does not exit in time.
func (b *Bouncer) stop() error {
	select {
	case <-b.exited:
		return nil
	default:
	}
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal pgbouncer: %w", err)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-b.exited:
		return nil
	case <-t.C:
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
	return errors.New("pgbouncer did not exit on SIGTERM; killed")
}

// logTail is the end of pgbouncer's log file and output; call it only
// after exited is closed or for a best-effort message.
func (b *Bouncer) logTail() string {
	var out []byte
	if data, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log")); err == nil {
		out = data
	}
	select {
	case <-b.exited:
		out = append(out, b.log.Bytes()...)
	default:
	}
	s := strings.TrimSpace(string(out))
	if len(s) > 2048 {
		s = s[len(s)-2048:]
	}
	return s
}

// LogTail returns the end of pgbouncer's log, for a failing test to print.
func (b *Bouncer) LogTail() string { return b.logTail() }
