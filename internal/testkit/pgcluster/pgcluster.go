// Package pgcluster starts throwaway PostgreSQL clusters from the server
// binaries installed on the machine: for tests, benchmarks and `billing demo`.
// A cluster listens on 127.0.0.1 only, trusts every local connection and is
// meant to be thrown away with its directory.
//
// The postmaster is a child of the calling process, started with a
// parent-death signal (Linux), so a test binary that crashes or is killed
// does not leave a postmaster running forever: the kernel sends it SIGQUIT
// (immediate shutdown) when the thread that started it goes away, and that
// thread lives exactly as long as the postmaster. What such a crash does
// leave is the data directory; it is the caller's.
//
// Run as root, the binaries run as the "postgres" OS user (initdb refuses
// root): the data directory is chowned to that user and, where an ancestor
// directory does not let that user through (t.TempDir and os.MkdirTemp make
// 0700 directories), the search bit for others (o+x, not read) is added to it.
// The binaries run with that user's credentials set directly on the child
// process (what `runuser -u postgres` does, without a PAM session and
// without an intermediate process that would swallow the parent-death
// signal).
//
// initdb's output is cached per user (initcache.go), so only the first
// cluster on a machine pays for initdb.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/internal/testkit/freeport"
	"github.com/acme/billing/internal/version"
)

// Options configures a cluster.
type Options struct {
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Fsync keeps Postgres durable (fsync, synchronous_commit and
	// full_page_writes on). Off is much faster and fine for tests; turn it on
	// for benchmarks, whose numbers should resemble production.
	Fsync bool
	// Logger receives start and stop events; nil discards them.
	Logger *slog.Logger
	// Settings are more server settings (name → value), given as -c after
	// the ones above: a test that needs, say, a lazy WAL writer.
	Settings map[string]string
}

// Cluster is one running (or stopped) throwaway Postgres cluster. Its
// methods are safe for concurrent use.
type Cluster struct {
	dir  string
	bin  string
	opts Options
	log  *slog.Logger
	cred *syscall.Credential // nil: run as the current user

	port atomic.Int64 // fixed once the first start succeeds

	mu   sync.Mutex // serialises Start and Stop
	proc *process   // nil when stopped
}

// process is one postmaster run.
type process struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the postmaster has exited and been reaped
	waitErr error         // set before exited is closed
}

const (
	// superuser is the cluster's superuser (initdb -U).
	superuser = "postgres"
	// logFile, inside the data directory, receives the postmaster's output.
	logFile = "postmaster.log"
	// startTimeout bounds a start when ctx has no earlier deadline.
	startTimeout = 60 * time.Second
	// stopTimeout bounds a fast shutdown when ctx has no earlier deadline,
	// before Stop escalates to an immediate shutdown.
	stopTimeout = 30 * time.Second
	// maxUnixSocketPath is below the 108 bytes of sockaddr_un.sun_path, less
	// the "/.s.PGSQL.nnnnn.lock" that Postgres appends.
	maxUnixSocketPath = 80
)

// Start creates (initdb) a cluster in data directory dir unless dir already
// holds one, starts it and waits until it accepts connections. The caller
// owns dir: Stop leaves it in place.
func Start(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	bin, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: data dir %q: %w", dir, err)
	}
	c := &Cluster{dir: abs, bin: bin, opts: opts, log: opts.Logger}
	c.port.Store(int64(opts.Port))
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if os.Geteuid() == 0 {
		if c.cred, err = PostgresCredential(); err != nil {
			return nil, err
		}
	}
	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Start restarts a stopped cluster on the same directory and port, for
// tests that simulate a Postgres outage. It fails if the cluster runs.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		select {
		case <-c.proc.exited:
			c.proc = nil
		default:
			return errors.New("pgcluster: start: already running")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()

	// A free port found by listening and closing may be taken again before
	// the postmaster binds it; pick another in that case.
	attempts := 1
	if c.port.Load() == 0 {
		attempts = 3
	}
	var err error
	for range attempts {
		port := int(c.port.Load())
		if port == 0 {
			if port, err = freeport.Port(); err != nil {
				return err
			}
		}
		var p *process
		if p, err = c.launch(port); err != nil {
			return err
		}
		if err = c.waitReady(ctx, p, port); err == nil {
			c.port.Store(int64(port))
			c.proc = p
			c.log.Info("postgres started", slog.String("dir", c.dir), slog.Int("port", port), slog.Int("pid", p.cmd.Process.Pid))
			return nil
		}
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		_ = stopProcess(sctx, p) // the start error says more than this one
		scancel()
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("pgcluster: start: %w", err)
}

// Stop shuts the cluster down as `pg_ctl stop -m fast` does (SIGINT: roll
// back open transactions, disconnect clients, checkpoint) and waits for it.
// If ctx ends first, it escalates to an immediate shutdown and then a kill.
// Stop is idempotent and leaves the data directory in place.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.halt(ctx, "postgres stopped", func(ctx context.Context, p *process) error {
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		if err := stopProcess(ctx, p); err != nil {
			return fmt.Errorf("pgcluster: stop: %w", err)
		}
		return nil
	})
}

// Crash shuts the cluster down as `pg_ctl stop -m immediate` does
// (SIGQUIT: no checkpoint, no flush of the WAL still in shared memory; the
// next start runs crash recovery) and waits for the postmaster to exit: a
// Postgres crash for tests of what a crash loses. Like Stop, it leaves the
// data directory, and Start brings the cluster back.
func (c *Cluster) Crash(ctx context.Context) error {
	return c.halt(ctx, "postgres crashed on purpose", func(ctx context.Context, p *process) error {
		if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("pgcluster: crash: %w", err)
		}
		select {
		case <-p.exited:
			return nil
		case <-ctx.Done():
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("pgcluster: crash: immediate shutdown did not finish: %w", ctx.Err())
		}
	})
}

// halt ends the running postmaster, if any, with end, under c.mu so that
// no Start runs meanwhile, and logs done once it has.
func (c *Cluster) halt(ctx context.Context, done string, end func(context.Context, *process) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc
	if p == nil {
		return nil
	}
	c.proc = nil
	if err := end(ctx, p); err != nil {
		return err
	}
	c.log.Info(done, slog.String("dir", c.dir), slog.Int("port", c.Port()))
	return nil
}

// DSN returns a URL connecting as the superuser to database dbname over TCP.
func (c *Cluster) DSN(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int { return int(c.port.Load()) }

// Dir returns the cluster's data directory.
func (c *Cluster) Dir() string { return c.dir }

// ErrUnavailable marks a cluster that cannot start because the machine has
// no Postgres server binaries.
var ErrUnavailable = errors.New("pgcluster: no Postgres server binaries (initdb, postgres)")

// FindBinDir returns the directory of the Postgres server binaries: the one
// `pg_config --bindir` names when it holds initdb and postgres, otherwise the
// highest version under /usr/lib/postgresql/*/bin (Debian's layout).
func FindBinDir() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); hasServer(dir) {
			return dir, nil
		}
	}
	dirs, err := filepath.Glob("/usr/lib/postgresql/*/bin")
	if err != nil {
		return "", fmt.Errorf("pgcluster: find binaries: %w", err)
	}
	dirs = slices.DeleteFunc(dirs, func(d string) bool { return !hasServer(d) })
	if len(dirs) == 0 {
		return "", fmt.Errorf("%w found via pg_config or under /usr/lib/postgresql/*/bin; install the postgresql package", ErrUnavailable)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		return version.Compare(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	return dirs[len(dirs)-1], nil
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// PostgresCredential is the credential of the postgres OS user, which the
// server (and PgBouncer) must run as when the tests run as root.
func PostgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup(superuser)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs the %q OS user: %w", superuser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: uid of %q: %w", superuser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: gid of %q: %w", superuser, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDir creates the data directory with the mode Postgres demands and,
// as root, hands it to the postgres user and makes its ancestors passable.
func (c *Cluster) prepareDir() error {
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o755); err != nil {
		return fmt.Errorf("pgcluster: create parent of %s: %w", c.dir, err)
	}
	if err := os.Mkdir(c.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("pgcluster: create %s: %w", c.dir, err)
	}
	if err := os.Chmod(c.dir, 0o700); err != nil {
		return fmt.Errorf("pgcluster: chmod %s: %w", c.dir, err)
	}
	if c.cred == nil {
		return nil
	}
	if err := c.chownData(); err != nil {
		return err
	}
	for p := filepath.Dir(c.dir); ; p = filepath.Dir(p) {
		if err := c.makeSearchable(p); err != nil {
			return err
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// chownData gives the data directory and everything in it to the postgres
// user (when running as root).
func (c *Cluster) chownData() error {
	if c.cred == nil {
		return nil
	}
	uid, gid := int(c.cred.Uid), int(c.cred.Gid)
	if err := filepath.WalkDir(c.dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	}); err != nil {
		return fmt.Errorf("pgcluster: chown %s: %w", c.dir, err)
	}
	return nil
}

// makeSearchable adds o+x to dir when the postgres user could not enter it.
func (c *Cluster) makeSearchable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("pgcluster: stat %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	mode := fi.Mode().Perm()
	switch {
	case st.Uid == c.cred.Uid && mode&0o100 != 0,
		st.Gid == c.cred.Gid && mode&0o010 != 0,
		mode&0o001 != 0:
		return nil
	}
	if err := os.Chmod(dir, fi.Mode()|0o001); err != nil {
		return fmt.Errorf("pgcluster: let %s through %s: %w", superuser, dir, err)
	}
	c.log.Info("added o+x so postgres can reach its data directory", slog.String("dir", dir))
	return nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	return cmd
}

// initdb creates the cluster unless the directory already holds one: from
// the initdb cache (initcache.go) when it can, by running initdb otherwise.
func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dir, "PG_VERSION")); err == nil {
		return nil
	}
	args := []string{"--auth=trust", "-U", superuser, "--encoding=UTF8", "--no-locale"}
	key, keyErr := c.cacheKey(ctx, args)
	if entries, err := os.ReadDir(c.dir); err == nil && len(entries) == 0 && keyErr == nil && c.fromCache(key) {
		if err := c.chownData(); err != nil {
			return err
		}
		c.log.Info("data directory copied from the initdb cache", slog.String("dir", c.dir))
		return nil
	}
	args = append(args, "-D", c.dir)
	if !c.opts.Fsync {
		args = append(args, "--no-sync")
	}
	start := time.Now()
	out, err := c.command(ctx, "initdb", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: initdb %s: %w\n%s", c.dir, err, tail(out, 2048))
	}
	c.log.Info("initdb done", slog.String("dir", c.dir), slog.Duration("took", time.Since(start)))
	if keyErr == nil {
		c.toCache(key)
	}
	return nil
}

// launch starts the postmaster on port.
func (c *Cluster) launch(port int) (*process, error) {
	args := []string{
		"-D", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=" + c.socketDir(),
		"-c", "max_connections=200",
	}
	if !c.opts.Fsync {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, name := range slices.Sorted(maps.Keys(c.opts.Settings)) {
		args = append(args, "-c", name+"="+c.opts.Settings[name])
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: open log: %w", err)
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...) //nolint:noctx // the postmaster outlives the call that started it; Stop ends it
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}

	p := &process{cmd: cmd, exited: make(chan struct{})}
	err = StartTied(cmd, p.exited, &p.waitErr, func() { _ = logf.Close() }) // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("pgcluster: run postgres: %w", err)
	}
	return p, nil
}

// StartTied starts cmd, whose SysProcAttr.Pdeathsig should be set, so that
// it dies with this process: the parent-death signal fires when the thread
// that forked exits, not the process, so the start happens on a goroutine
// locked to its thread that then waits for cmd, and the thread lives
// exactly as long as cmd (it ends, locked, after cmd exits). afterStart,
// when not nil, runs right after the start attempt. Once cmd has exited and
// been reaped, its error is stored in *waitErr and exited is closed.
func StartTied(cmd *exec.Cmd, exited chan<- struct{}, waitErr *error, afterStart func()) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer close(exited)
		err := cmd.Start()
		if afterStart != nil {
			afterStart()
		}
		started <- err
		if err != nil {
			*waitErr = err
			return
		}
		*waitErr = cmd.Wait()
	}()
	return <-started
}

// socketDir is the data directory, unless its path is too long for a unix
// socket; then no socket is made (clients use TCP anyway).
func (c *Cluster) socketDir() string {
	if len(c.dir) > maxUnixSocketPath || strings.ContainsAny(c.dir, ", '\"") {
		return ""
	}
	return c.dir
}

// waitReady polls until this cluster's postmaster accepts connections, it
// exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, p *process, port int) error {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=postgres sslmode=disable connect_timeout=2", port, superuser)
	return PollReady(ctx, "postgres", p.exited, func() error { return p.waitErr }, c.logTail,
		func(ctx context.Context) error { return c.isOurs(ctx, dsn) })
}

// PollReady calls check every 20 ms until it succeeds, or the child whose
// exit closes exited has exited (exitErr then says how), or ctx ends; the
// errors name the child (what) and end with tail(), its log's last lines.
// The wait of a started server child (Postgres, PgBouncer) for its first
// answer.
func PollReady(ctx context.Context, what string, exited <-chan struct{}, exitErr func() error, tail func() string, check func(context.Context) error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-exited:
			err := exitErr()
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited (%w) before accepting connections:\n%s", what, err, tail())
		default:
		}
		if lastErr = check(ctx); lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %w)\n%s", what, ctx.Err(), lastErr, tail())
		case <-exited:
		case <-tick.C:
		}
	}
}

// isOurs connects and checks that the server answering is this cluster, not
// another one that holds the port.
func (c *Cluster) isOurs(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return err
	}
	want, err := filepath.EvalSymlinks(c.dir)
	if err != nil {
		return err
	}
	if got, err := filepath.EvalSymlinks(dataDir); err != nil || got != want {
		return fmt.Errorf("port answered by another server (data_directory %q)", dataDir)
	}
	return nil
}

func (c *Cluster) logTail() string {
	b, err := os.ReadFile(filepath.Join(c.dir, logFile))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return tail(b, 2048)
}

// stopProcess sends a fast shutdown and waits; when ctx ends first it sends
// an immediate shutdown, then kills.
func stopProcess(ctx context.Context, p *process) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal postgres: %w", err)
	}
	select {
	case <-p.exited:
		return nil
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	grace := time.NewTimer(5 * time.Second)
	defer grace.Stop()
	select {
	case <-p.exited:
	case <-grace.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return fmt.Errorf("fast shutdown did not finish: %w", ctx.Err())
}

func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
