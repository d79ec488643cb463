package app

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/testkit/freeport"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
)

// switchedGateway serves a gateway stub on a fixed loopback port that can
// be taken down (connections refused) and brought back.
type switchedGateway struct {
	t    *testing.T
	stub *gatewaystub.Stub
	addr string
	mu   sync.Mutex
	srv  *http.Server
	done chan error
	tls  *tls.Config // serves https with it when not nil
}

// newSwitchedGateway returns a gateway that is down (nothing listens).
func newSwitchedGateway(t *testing.T) *switchedGateway {
	t.Helper()
	// The gateway comes up and goes down on this port again and again, so it
	// must lie where no outgoing connection can be given it meanwhile.
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	g := &switchedGateway{t: t, stub: gatewaystub.New(gatewaystub.Options{}), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	t.Cleanup(g.down)
	t.Cleanup(g.stub.Close)
	return g
}

func (g *switchedGateway) url() string {
	if g.tls != nil {
		return "https://" + g.addr
	}
	return "http://" + g.addr
}

// up starts serving on the gateway's port.
func (g *switchedGateway) up() {
	g.t.Helper()
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatalf("gateway back on %s: %v", g.addr, err)
	}
	if g.tls != nil {
		ln = tls.NewListener(ln, g.tls)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.srv = &http.Server{Handler: g.stub, ReadHeaderTimeout: 5 * time.Second}
	g.done = make(chan error, 1)
	go func() { g.done <- g.srv.Serve(ln) }()
}

func (g *switchedGateway) down() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.srv == nil {
		return
	}
	_ = g.srv.Close()
	if err := <-g.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		g.t.Errorf("gateway: %v", err)
	}
	g.srv = nil
}

// readyz returns the status code of GET /readyz.
func (h *harness) readyz() int {
	h.t.Helper()
	addr := h.app.HTTPAddr()
	if addr == "" {
		return 0
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// routed is how many records went to a retry tier or the DLQ.
func (h *harness) routed() int { return h.outcome("retried") + h.outcome("dead_lettered") }

// A gateway that refuses connections is an outage even for a slow stream
// (one event every 2 s: the breaker's ratio never sees enough calls): no
// record reaches a tier or the DLQ, consumption pauses, and once the
// gateway is back every event is billed.
func TestGatewayRefusingConnectionsAtLowRatePauses(t *testing.T) {
	t.Parallel()
	gw := newSwitchedGateway(t)
	h := newHarness(t, nil, func(c *config.Config) { c.PaymentBaseURL = gw.url() })
	poll.Until(t, "/readyz 200 at start", 20*time.Second, func() bool { return h.readyz() == http.StatusOK })

	var msgs []kafkago.Message
	for _, id := range []string{"ord-slow-1", "ord-slow-2", "ord-slow-3"} {
		_, m := event(t, id, "cus-1", 700)
		msgs = append(msgs, m)
	}
	// The rate of the reproduction: one event every 2 s.
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for i, m := range msgs {
		if i > 0 {
			<-tick.C
		}
		h.send(m)
	}
	poll.Until(t, "the pause", 15*time.Second, func() bool {
		return testutil.ToFloat64(h.app.Metrics.ConsumerPaused) == 1 && h.readyz() == http.StatusServiceUnavailable
	})
	if n := h.routed(); n != 0 {
		t.Fatalf("%d records routed to a tier or the DLQ while the gateway refused connections, want 0", n)
	}

	gw.up()
	poll.Until(t, "every event billed", 30*time.Second, func() bool { return h.outcome("charged") == len(msgs) })
	poll.Until(t, "/readyz 200 again", 10*time.Second, func() bool { return h.readyz() == http.StatusOK })
	if n := h.routed(); n != 0 {
		t.Errorf("%d records routed to a tier or the DLQ, want 0", n)
	}
	if v := testutil.ToFloat64(h.app.Metrics.ConsumerPaused); v != 0 {
		t.Errorf("billing_consumer_paused = %v after the gateway came back, want 0", v)
	}
}

// A gateway answering 401 to every call (an expired API key) is an outage
// of the service, not a fault of the events: paused, /readyz 503, nothing
// dead-lettered; billing resumes when the key is accepted again.
func TestGatewayRefusingCredentialsPauses(t *testing.T) {
	t.Parallel()
	gw := gatewaystub.New(gatewaystub.Options{})
	gw.SetFault(func(gatewaystub.Call, int) gatewaystub.Fault {
		return gatewaystub.Fault{Status: http.StatusUnauthorized}
	})
	h := newHarness(t, gw, nil)
	var msgs []kafkago.Message
	for _, id := range []string{"ord-401-1", "ord-401-2", "ord-401-3", "ord-401-4", "ord-401-5"} {
		_, m := event(t, id, "cus-1", 900)
		msgs = append(msgs, m)
	}
	h.send(msgs...)
	poll.Until(t, "the pause", 15*time.Second, func() bool {
		return testutil.ToFloat64(h.app.Metrics.ConsumerPaused) == 1 && h.readyz() == http.StatusServiceUnavailable
	})
	// Held events keep trying, but only one call at a time reaches the
	// gateway, after each cool-down of its breaker (a probe): wait for
	// one of those 401s, then check nothing was routed meanwhile.
	calls := len(gw.Calls())
	poll.Until(t, "a held event probing the gateway", 20*time.Second, func() bool { return len(gw.Calls()) >= calls+1 })
	if n := h.routed(); n != 0 {
		t.Fatalf("%d records routed to a tier or the DLQ on 401, want 0", n)
	}
	if ready, why := h.app.Ready(); ready {
		t.Error("Ready() = true while the gateway refuses our credentials")
	} else {
		t.Logf("during the outage Ready says: %s", why)
	}

	gw.SetFault(nil)
	poll.Until(t, "every event billed", 30*time.Second, func() bool { return h.outcome("charged") == len(msgs) })
	poll.Until(t, "/readyz 200 again", 10*time.Second, func() bool { return h.readyz() == http.StatusOK })
	if n := h.routed(); n != 0 {
		t.Errorf("%d records routed, want 0", n)
	}
	for _, id := range []string{"ord-401-1", "ord-401-5"} {
		if n := len(gw.ChargesForOrder(id)); n != 1 {
			t.Errorf("%s charged %d times, want 1", id, n)
		}
	}
}

// Postgres failing internally (SQLSTATE XX000, here raised by a trigger on
// invoice) while it still answers pings: consumption pauses, nothing is
// dead-lettered, and the held events are billed once the fault is gone.
func TestPostgresInternalErrorPauses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, nil)
	ctx := context.Background()
	pool := h.pool
	for _, stmt := range []string{
		`CREATE FUNCTION fail_internally() RETURNS trigger LANGUAGE plpgsql AS
		 $$BEGIN RAISE EXCEPTION 'could not read block 7' USING ERRCODE = 'XX001'; END$$`,
		`CREATE TRIGGER fail_internally BEFORE INSERT ON invoice FOR EACH ROW EXECUTE FUNCTION fail_internally()`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	_, m := event(t, "ord-xx-1", "cus-1", 300)
	h.send(m)
	poll.Until(t, "the pause", 15*time.Second, func() bool {
		return testutil.ToFloat64(h.app.Metrics.ConsumerPaused) == 1 && h.readyz() == http.StatusServiceUnavailable
	})
	if n := h.routed(); n != 0 {
		t.Fatalf("%d records routed on SQLSTATE XX001, want 0", n)
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER fail_internally ON invoice`); err != nil {
		t.Fatal(err)
	}
	h.waitInvoice("ord-xx-1", order.StatusCharged)
	poll.Until(t, "/readyz 200 again", 10*time.Second, func() bool { return h.readyz() == http.StatusOK })
	if n := h.routed(); n != 0 {
		t.Errorf("%d records routed, want 0", n)
	}
}

// A process started while Postgres is down serves /healthz at once, says
// "not ready" while it waits (instead of exiting after 30 s), and bills
// once Postgres is back.
func TestStartWaitsForPostgres(t *testing.T) {
	t.Parallel()
	cl, pool := pgtest.NewMigratedCluster(t)
	ctx := context.Background()
	if err := cl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h := newHarnessOn(t, nil, pool, cl.DSN("postgres"), nil)
	get := func(path string) int {
		resp, err := http.Get("http://" + h.app.HTTPAddr() + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	poll.Until(t, "/healthz 200 while Postgres is down", 10*time.Second, func() bool { return get("/healthz") == http.StatusOK })
	poll.Until(t, "not ready, waiting for postgres", 10*time.Second, func() bool {
		_, why := h.app.Ready()
		return strings.Contains(why, "postgres")
	})
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while Postgres is down, want 503", code)
	}
	_, m := event(t, "ord-late-pg", "cus-1", 100)
	h.send(m)
	select {
	case err := <-h.done:
		h.done <- err
		t.Fatalf("Run returned while waiting for Postgres: %v", err)
	default:
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitInvoice("ord-late-pg", order.StatusCharged)
	poll.Until(t, "/readyz 200", 10*time.Second, func() bool { return get("/readyz") == http.StatusOK })
}

// Kafka unreachable at start: the process waits, not ready, until it is
// told to stop, and then stops cleanly.
func TestStartWaitsForKafka(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := ln.Addr().String()
	_ = ln.Close()
	_, dsn := pgtest.NewDB(t)
	cfg := testConfig([]string{nowhere}, dsn, "http://127.0.0.1:1")
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a, err := New(ctx, cfg, Tuning{Reader: kafkatest.FastReaderOptions(), ProbeInterval: 200 * time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	poll.Until(t, "not ready, waiting for kafka", 10*time.Second, func() bool {
		ready, why := a.Ready()
		return !ready && strings.Contains(why, "kafka")
	})
	resp, err := http.Get("http://" + a.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d, want 503", resp.StatusCode)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after stop while waiting for Kafka: %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after stop")
	}
}

// Missing migrations still end the process at start, with the HTTP server
// closed behind it.
func TestStartFailsWithoutMigrations(t *testing.T) {
	t.Parallel()
	cl := pgtest.NewCluster(t)
	kc := kafkatest.NewFake(t)
	cfg := testConfig(kc.Brokers(), cl.DSN("postgres"), "http://127.0.0.1:1")
	ctx := context.Background()
	a, err := New(ctx, cfg, Tuning{Reader: kafkatest.FastReaderOptions()}, slog.New(slog.DiscardHandler))
	if err == nil {
		err = a.Run(ctx)
	}
	if err == nil || !strings.Contains(err.Error(), "migrations missing") {
		t.Fatalf("err = %v, want migrations missing", err)
	}
	if a != nil {
		if _, err := net.DialTimeout("tcp", a.HTTPAddr(), time.Second); err == nil {
			t.Error("the HTTP server still listens after Run returned")
		}
	}
}

// A database that does not exist is a mistake in the configuration, not an
// outage: the process stops at start with one line naming the variable
// (as billing migrate does), instead of waiting for ever.
func TestStartFailsOnAMissingDatabase(t *testing.T) {
	t.Parallel()
	cl := pgtest.NewCluster(t)
	kc := kafkatest.NewFake(t)
	cfg := testConfig(kc.Brokers(), cl.DSN("no_such_db"), "http://127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := New(ctx, cfg, Tuning{Reader: kafkatest.FastReaderOptions()}, slog.New(slog.DiscardHandler))
	if err == nil {
		err = a.Run(ctx)
	}
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run() = %v (context %v), want it to stop at once", err, ctx.Err())
	}
	msg := err.Error()
	if !strings.Contains(msg, "does not exist") || !strings.Contains(msg, "BILLING_DATABASE_URL") || strings.Contains(msg, "\n") {
		t.Errorf("error %q: want one line saying the database does not exist and naming BILLING_DATABASE_URL", msg)
	}
}

// /readyz answers from the state the consumer acts on: the moment a held
// event goes through after a Postgres outage, the process is ready again,
// without waiting for a periodic re-check (which took up to 5 s).
func TestReadyAsSoonAsConsumptionResumes(t *testing.T) {
	t.Parallel()
	cl, pool := pgtest.NewMigratedCluster(t)
	ctx := context.Background()
	h := newHarnessOn(t, nil, pool, cl.DSN("postgres"), nil)
	// A probe interval far longer than the outage: readiness must not
	// depend on it.
	h.shutdown()
	h.startWith(Tuning{Reader: kafkatest.FastReaderOptions(), CommitInterval: 50 * time.Millisecond,
		ProbeInterval: 3 * time.Second, LagInterval: time.Second, OutageBackoff: 50 * time.Millisecond})
	poll.Until(t, "ready at start", 20*time.Second, func() bool { ok, _ := h.app.Ready(); return ok })

	if err := cl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, m := event(t, "ord-ready-1", "cus-1", 100)
	h.send(m)
	poll.Until(t, "not ready, naming postgres", 20*time.Second, func() bool {
		ok, why := h.app.Ready()
		return !ok && strings.Contains(why, "postgres")
	})
	// The outage lasts two probe intervals, by design of the test: a
	// periodic probe has seen Postgres down by then.
	outage := time.NewTimer(6 * time.Second)
	<-outage.C
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the held event billed", 30*time.Second, func() bool { return h.outcome("charged") == 1 })
	if ok, why := h.app.Ready(); !ok {
		t.Errorf("consumption resumed (the held event was billed) but Ready() = false: %s", why)
	}
}

// A part that fails stops the others: here dedup maintenance cannot start
// (it already runs), so Run stops the consumers, closes the HTTP server and
// returns that error, rather than leaving a half-alive process.
func TestFailingPartStopsRun(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	kc := kafkatest.NewFake(t)
	kafkatest.CreateTopics(t, kc.Brokers(), 1, testTopic)
	cfg := testConfig(kc.Brokers(), dsn, "http://127.0.0.1:9")
	ctx := context.Background()
	a, err := New(ctx, cfg, Tuning{Reader: kafkatest.FastReaderOptions()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.maint.Start(ctx); err != nil { // the maintainer Run will try to start
		t.Fatal(err)
	}
	defer a.maint.Stop()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }() // ctx never ends: only the failure can stop Run
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "dedup maintenance") {
			t.Errorf("Run = %v, want the maintainer's error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still running 30s after its maintainer failed to start")
	}
	if c, err := net.DialTimeout("tcp", a.HTTPAddr(), time.Second); err == nil {
		_ = c.Close()
		t.Error("the HTTP server still listens after Run returned")
	}
}
