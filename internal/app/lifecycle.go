package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/service"
)

// Every goroutine of a running App that outlives a call belongs to one of
// its parts, each a service.Service: Run starts them in order, waits for
// its context to end or a part to fail, and stops them in the reverse
// order, each Stop waiting for its goroutines.

// failures keeps the first failure that a part reports while it runs (the
// HTTP server that stops serving, a consumer that fails) and ends the run.
type failures struct {
	mu    sync.Mutex
	first error
	end   context.CancelFunc
}

// fail records err, the first one only, and ends the run; nil ends it
// without a failure (a part that is done by itself).
func (f *failures) fail(err error) {
	f.mu.Lock()
	if f.first == nil && err != nil {
		f.first = err
	}
	f.mu.Unlock()
	f.end()
}

func (f *failures) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// Run serves HTTP at once, waits for Postgres and Kafka (not ready
// meanwhile), then consumes until ctx ends or a part fails (a consumer, a
// background service that does not start, the HTTP server); the first
// failure stops the rest. The parts start in this order and stop in the
// reverse one:
//
//  1. the HTTP server (/metrics, /healthz and /readyz answer until the
//     end);
//  2. the probes of the dependencies (until the consumers are done, a
//     held event may need a probe to resume);
//     — here Run waits for Postgres and Kafka (start) —
//  3. the lag gauges, the release gate and the reads of the consumption
//     switch;
//  4. the background services: the dedup maintenance, the pending
//     completer, the outbox relay (stopped after the consumers' final
//     commit, so the events settled during the drain get a pass);
//  5. the consumers, whose stop is: stop fetching, drain what is in
//     flight within BILLING_SHUTDOWN_TIMEOUT, final commit.
//
// Then the store's grouped statements and the pool close with the rest of
// what New built (Close). It returns nil on a clean drain, else the first
// failure.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()

	runCtx, end := context.WithCancel(ctx)
	defer end()
	f := &failures{end: end}
	// The parts run until their Stop, not until ctx's end: the order of
	// the stops is Run's.
	bg := context.WithoutCancel(ctx)
	var parts service.Sequence
	err := parts.Start(bg, a.earlyParts(f)...)
	if err == nil {
		if err = a.start(runCtx); err != nil && runCtx.Err() != nil {
			err = nil // stopped while waiting for a dependency
		}
		if err == nil && runCtx.Err() == nil {
			err = parts.Start(bg, a.parts(runCtx, f)...)
		}
	}
	if err == nil {
		<-runCtx.Done()
	}
	parts.Stop()
	if err == nil {
		err = f.err()
	}
	a.log.Info("billing stopped")
	return err
}

// earlyParts are what runs before the dependencies are reached: the HTTP
// server and the probes, which tell /readyz what the process waits for.
func (a *App) earlyParts(f *failures) []service.Named {
	return []service.Named{
		{Name: "http server", Service: &httpServer{srv: a.srv, ln: a.ln, log: a.log, fail: f.fail}},
		{Name: "probes", Service: service.NewLoop(func(ctx context.Context) {
			a.pause.Run(ctx, health.ProbeOptions{Every: a.tune.ProbeInterval, WhilePaused: a.tune.ProbeInterval / 10})
		})},
	}
}

// parts are what runs once Postgres and Kafka were reached, in start
// order (see Run); the consumers look for their topics under setup, which
// ends with the run.
func (a *App) parts(setup context.Context, f *failures) []service.Named {
	ps := []service.Named{
		{Name: "lag", Service: service.NewLoop(a.lagLoop)},
		{Name: "release gate", Service: service.NewLoop(a.gate.Run)},
		{Name: "consumption switch", Service: service.NewLoop(a.switchLoop)},
		{Name: "dedup maintenance", Service: a.maint},
		{Name: "pending completer", Service: a.pending},
	}
	if a.relay != nil {
		ps = append(ps, service.Named{Name: "outbox relay", Service: a.relay})
	}
	return append(ps, service.Named{Name: "consumers", Service: &consumers{a: a, fail: f.fail, setup: setup}})
}

// httpServer serves /metrics, /healthz and /readyz until Stop; a Serve
// that fails before is the run's failure.
type httpServer struct {
	srv  *http.Server
	ln   net.Listener
	log  *slog.Logger
	fail func(error)
	done chan struct{} // closed when Serve returned; nil when not started
}

func (h *httpServer) Start(context.Context) error {
	if h.done != nil {
		return service.ErrRunning
	}
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(h.ln); !errors.Is(err, http.ErrServerClosed) {
			h.fail(fmt.Errorf("http server: %w", err))
		}
	}()
	h.log.Info("http server listening", slog.String("http", h.ln.Addr().String()))
	return nil
}

// Stop shuts the server down, giving the requests in flight a few seconds,
// and waits for Serve to return.
func (h *httpServer) Stop() {
	if h.done == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	<-h.done
}

// httpShutdownTimeout is how long the requests in flight get to finish at
// stop (scrapes and probes are quick).
const httpShutdownTimeout = 5 * time.Second

// consumers runs one consumer per topic (the main one and each tier) until
// Stop, or until one fails, which stops the others and the run; each
// drains and makes its final commit before the readers and the writer
// close.
type consumers struct {
	a     *App
	fail  func(error)
	setup context.Context // bounds the look for the tiers' topics at start
	run   service.Base
}

func (c *consumers) Start(ctx context.Context) error {
	cs, closeAll, err := c.a.newConsumers(c.setup)
	if err != nil {
		return err
	}
	err = c.run.Start(ctx, func(ctx context.Context) {
		defer closeAll()
		all, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		for _, con := range cs {
			wg.Go(func() {
				if err := con.Run(all); err != nil {
					cancel() // one fails: the others stop too
					c.fail(err)
				}
			})
		}
		wg.Wait()
		if ctx.Err() == nil {
			c.fail(nil) // done before Stop: the consumers' end is the run's end
		}
	})
	if err != nil {
		closeAll()
		return err
	}
	cfg := c.a.cfg
	c.a.log.Info("billing started", slog.String("topic", cfg.KafkaTopic), slog.String("group", cfg.KafkaGroupID),
		slog.Int("max_in_flight", cfg.MaxInFlight), slog.String("http", c.a.ln.Addr().String()))
	return nil
}

// Stop stops fetching, drains, makes the final commits and waits for them.
func (c *consumers) Stop() { c.run.Stop() }
