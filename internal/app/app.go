// Package app wires billing together from a Config: it is what `billing run`
// runs, and what `billing demo` and the end-to-end tests start in-process.
// Only here (and in cmd/billing) are objects built from configuration.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	kafkago "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	httpgateway "github.com/acme/billing/adapters/out/http"
	kafkapub "github.com/acme/billing/adapters/out/kafka"
	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/version"
)

// Tuning holds knobs that are not part of the public configuration but that
// tests and the demo turn to go fast.
type Tuning struct {
	Reader         kafkaclient.ReaderOptions
	CommitInterval time.Duration
	ProbeInterval  time.Duration // health check of Postgres and Kafka while nothing is down; a tenth of it while paused
	LagInterval    time.Duration
	OutageBackoff  time.Duration // first wait after an outage (0: the policy's); doubles up to the policy's maximum
	// Tracer records the spans of each record (nil: none); its owner
	// flushes it after Run returns.
	Tracer trace.TracerProvider
	// GatewayTLS is the TLS configuration of the gateway client (nil: the
	// system's roots); tests trust their stub's certificate with it, since
	// credentials in BILLING_PAYMENT_BASE_URL need https.
	GatewayTLS *tls.Config
}

// App is one billing process: New builds it, Run runs it, Close releases
// what New built.
type App struct {
	cfg     config.Config
	tune    Tuning
	policy  order.RetryPolicy // the one retry policy, built from cfg by New
	log     *slog.Logger
	reg     *prometheus.Registry
	Metrics *metrics.Metrics

	pool    *pgxpool.Pool
	store   *postgres.Store
	kc      *kafkaclient.Cluster
	gateway *httpgateway.Client
	pause   *kafkain.Pause
	maint   *postgres.DedupMaintainer
	srv     *http.Server
	ln      net.Listener
	pending *order.PendingCompleter
	billing *order.BillingService // the consumers' and the completer's
	relay   *order.OutboxRelay    // nil when BILLING_PUBLISH_EVENTS=false

	cleanup   []func() // run in reverse by Close
	closeOnce sync.Once
}

// New builds everything Run needs without reaching Kafka, Postgres or the
// gateway: it fails only on what no waiting can fix (a DSN that does not
// parse, Kafka security settings that cannot work, the HTTP address taken).
// Call Close when Run is never called; Run closes the App itself.
func New(ctx context.Context, cfg config.Config, tune Tuning, log *slog.Logger) (_ *App, err error) {
	a := &App{cfg: cfg, tune: tune, policy: retryPolicy(cfg, tune), log: log, reg: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	a.Metrics = metrics.New(a.reg, true)
	bi := version.Get()
	metrics.RegisterBuildInfo(a.reg, bi.Version, bi.Revision, bi.GoVersion)
	a.Metrics.InFlight.WithLabelValues(cfg.KafkaTopic) // exported at 0 from the first scrape
	a.Metrics.GatewayKeyTTL.Set(cfg.GatewayKeyTTL.Seconds())
	a.Metrics.PendingResumeAfter.Set(cfg.PendingResumeAfter.Seconds())
	if a.tune.CommitInterval == 0 {
		a.tune.CommitInterval = 200 * time.Millisecond
	}
	if a.tune.ProbeInterval == 0 {
		a.tune.ProbeInterval = 5 * time.Second
	}
	if a.tune.LagInterval == 0 {
		a.tune.LagInterval = 15 * time.Second
	}

	a.pool, err = postgres.OpenPool(ctx, cfg.DatabaseURL.Reveal(), cfg.DBMaxConns, postgres.WithTracerProvider(tune.Tracer))
	if err != nil {
		return nil, err
	}
	a.onClose(a.pool.Close)
	pool := a.pool
	a.Metrics.DBPool.Watch(func() metrics.PoolStats {
		st := pool.Stat()
		return metrics.PoolStats{
			Max: st.MaxConns(), Total: st.TotalConns(), Acquired: st.AcquiredConns(),
			Acquires: st.AcquireCount(), EmptyAcquires: st.EmptyAcquireCount(), EmptyAcquireWait: st.EmptyAcquireWaitTime(),
		}
	})
	a.store = postgres.NewStore(pool, postgres.WithRetryPolicy(a.policy), postgres.WithEvents(cfg.PublishEvents),
		postgres.WithGroupObserver(func(op string, n int) {
			a.Metrics.DBGroupEvents.WithLabelValues(op).Observe(float64(n))
		}))
	a.maint, err = postgres.NewDedupMaintainer(pool, postgres.DedupOptions{
		Retention: cfg.DedupRetention, Metrics: a.Metrics, Logger: log})
	if err != nil {
		return nil, err
	}

	a.kc, err = kafkaclient.NewCluster(KafkaSettings(cfg))
	if errors.Is(err, kafkaclient.ErrSASLCredentials) {
		return nil, fmt.Errorf("%w: check BILLING_KAFKA_SASL_USERNAME and BILLING_KAFKA_SASL_PASSWORD", err)
	}
	if err != nil {
		return nil, err
	}
	a.gateway, err = httpgateway.NewClient(cfg.PaymentBaseURL, cfg.PaymentTimeout,
		httpgateway.WithMetrics(a.Metrics.PaymentRequests, a.Metrics.PaymentDuration),
		httpgateway.WithIdleConns(max(cfg.MaxInFlight, 2)),
		httpgateway.WithLogger(log),
		httpgateway.WithTracerProvider(tune.Tracer),
		httpgateway.WithTLSConfig(tune.GatewayTLS))
	if err != nil {
		return nil, fmt.Errorf("payment client: %w", err)
	}
	a.onClose(a.gateway.CloseIdleConnections)

	a.pause = kafkain.NewPause(a.Metrics.ConsumerPaused, log)
	a.pause.SetProbe(order.DependencyPostgres, a.store.Ping)
	a.pause.SetProbe(order.DependencyKafka, a.kc.Ping)

	if a.ln, err = new(net.ListenConfig).Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	a.onClose(func() { _ = a.ln.Close() })
	a.srv = &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		// Scrapes and probes are small and quick; a client that holds a
		// connection open must not hold a goroutine and a socket for ever.
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 30 * time.Second, // a scrape of every series, on a slow link
		IdleTimeout:  2 * time.Minute,
	}

	a.billing = order.NewBillingService(a.store, a.gateway, cfg.KafkaGroupID,
		order.WithAttemptTerms(order.NewAttemptTerms(cfg.PaymentTimeout, cfg.GatewayKeyTTL)))
	a.pending = order.NewPendingCompleter(a.store, a.billing,
		order.CompleterOptions{ResumeAfter: cfg.PendingResumeAfter, Logger: log, Stats: func(s order.PendingStats) {
			a.Metrics.InvoicesPending.Set(float64(s.Count))
			a.Metrics.PendingOldest.Set(s.Oldest.Seconds())
			a.Metrics.InvoicesHeld.Set(float64(s.Held))
		}})
	if cfg.PublishEvents {
		writer, closeWriter := a.kc.NewWriter()
		a.onClose(func() {
			if err := closeWriter(); err != nil {
				log.Warn("close the invoice events' writer", slog.String("error", err.Error()))
			}
		})
		a.relay = order.NewOutboxRelay(a.store, kafkapub.NewPublisher(writer, cfg.KafkaInvoiceTopic), order.RelayOptions{
			Logger: log,
			Published: func(events []order.InvoiceEvent, at time.Time) {
				for _, e := range events {
					a.Metrics.PublishedEvents.WithLabelValues(string(e.Type())).Inc()
					a.Metrics.PublishLag.Observe(at.Sub(e.OccurredAt).Seconds())
				}
			},
			Stats: func(s order.OutboxStats) {
				a.Metrics.OutboxPending.Set(float64(s.Pending))
				a.Metrics.OutboxOldest.Set(s.Oldest.Seconds())
			},
		})
	}
	return a, nil
}

// retryPolicy is the process's one retry policy: the configured tier
// delays (BILLING_RETRY_DELAYS) and the service's schedules, the first
// outage wait shortened when tune says so.
func retryPolicy(cfg config.Config, tune Tuning) order.RetryPolicy {
	p := order.NewRetryPolicy(cfg.RetryDelaysDurations()...)
	if tune.OutageBackoff > 0 {
		p.Outage.Min = tune.OutageBackoff
	}
	return p
}

// onClose pushes f onto the cleanup stack.
func (a *App) onClose(f func()) { a.cleanup = append(a.cleanup, f) }

// Close releases what New built, last built first. It is safe to call more
// than once; Run calls it when it returns.
func (a *App) Close() {
	a.closeOnce.Do(func() {
		for i := len(a.cleanup) - 1; i >= 0; i-- {
			a.cleanup[i]()
		}
	})
}

// KafkaSettings extracts the Kafka connection settings from cfg.
func KafkaSettings(cfg config.Config) kafkaclient.Settings {
	return kafkaclient.Settings{
		Brokers:       cfg.KafkaBrokers,
		ClientID:      cfg.KafkaClientID,
		TLS:           cfg.KafkaTLSEnabled,
		TLSCAFile:     cfg.KafkaTLSCAFile,
		SASLMechanism: cfg.KafkaSASLMechanism,
		SASLUsername:  cfg.KafkaSASLUsername,
		SASLPassword:  cfg.KafkaSASLPassword.Reveal(),
	}
}

// Handler returns the HTTP handler of /metrics, /healthz and /readyz.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// Ready reports whether the process is ready for traffic: it started, and
// no dependency is down. It answers from the state the consumers act on.
func (a *App) Ready() (bool, string) { return a.pause.Ready() }

// Run serves HTTP at once, waits for Postgres and Kafka (not ready
// meanwhile), then consumes until ctx ends or a part fails (a consumer, a
// background service that does not start, the HTTP server); the first
// failure stops the rest. It stops in this order:
//
//  1. stop fetching;
//  2. drain what is in flight, within BILLING_SHUTDOWN_TIMEOUT;
//  3. final commit of each consumer (steps 1–3 are consume's);
//  4. stop the background services, last started first: the outbox relay
//     (after the final commit, so the events settled during the drain get
//     a pass), the pending completer, the dedup maintenance;
//  5. stop the probes and the lag loop (until the consumers are done, a
//     held event may need a probe to resume);
//  6. close the HTTP server (/metrics, /healthz and /readyz answer until
//     here);
//  7. close the pool and the rest of what New built (Close).
//
// It returns nil on a clean drain, else the first failure.
func (a *App) Run(ctx context.Context) error {
	defer a.Close() // 7.

	// Start. What outlives the drain runs without ctx's end, until its
	// stop below.
	bg := context.WithoutCancel(ctx)
	served := a.serveHTTP()
	loopCtx, stopLoops := context.WithCancel(bg)
	defer stopLoops()
	var loops sync.WaitGroup // the probes and the lag loop
	loops.Go(func() {
		a.pause.Run(loopCtx, kafkain.ProbeOptions{Every: a.tune.ProbeInterval, WhilePaused: a.tune.ProbeInterval / 10})
	})

	// Run until ctx ends or a part fails. The consumers' end is the run's
	// end: it ends the watch of the HTTP server too.
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return served.failed(gctx) })
	g.Go(func() error {
		defer endRun()
		if err := a.start(gctx); err != nil {
			if gctx.Err() != nil {
				return nil // stopped while waiting for a dependency
			}
			return err
		}
		if err := a.startBackground(bg); err != nil {
			return err
		}
		loops.Go(func() { a.lagLoop(loopCtx) })
		return a.consume(gctx) // 1.–3.
	})
	err := g.Wait()

	// Ordered stops, after the consumers' final commit.
	a.stopBackground() // 4.
	stopLoops()        // 5.
	loops.Wait()
	if herr := a.shutdownHTTP(ctx, served); err == nil { // 6.
		err = herr
	}
	a.log.Info("billing stopped")
	return err
}

// backgroundService is a loop that runs beside the consumers, started
// once they may start and stopped after their final commit.
type backgroundService struct {
	name string
	svc  interface {
		Start(context.Context) error
		Stop()
	}
}

// background lists the background services in start order: the dedup
// maintenance, the pending completer and, when events are published, the
// outbox relay. They stop in the reverse order.
func (a *App) background() []backgroundService {
	bs := []backgroundService{{"dedup maintenance", a.maint}, {"pending completer", a.pending}}
	if a.relay != nil {
		bs = append(bs, backgroundService{"outbox relay", a.relay})
	}
	return bs
}

// startBackground starts the background services under ctx; the first
// that fails to start ends it (stopBackground stops those started).
func (a *App) startBackground(ctx context.Context) error {
	for _, b := range a.background() {
		if err := b.svc.Start(ctx); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
	}
	return nil
}

// stopBackground stops the background services, last started first, each
// waiting for its pass in progress; a service not started is a no-op.
func (a *App) stopBackground() {
	bs := a.background()
	for i := len(bs) - 1; i >= 0; i-- {
		bs[i].svc.Stop()
	}
}

// serving is the HTTP server's Serve, running in a goroutine of its own
// until shutdownHTTP.
type serving struct {
	done chan struct{} // closed when Serve returned
	err  error         // what Serve returned; read after done
}

// serveHTTP serves /metrics, /healthz and /readyz in a goroutine.
func (a *App) serveHTTP() *serving {
	s := &serving{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = a.srv.Serve(a.ln)
	}()
	a.log.Info("http server listening", slog.String("http", a.ln.Addr().String()))
	return s
}

// failed returns the HTTP server's failure if it stops serving before ctx
// ends, nil when ctx ends first.
func (s *serving) failed(ctx context.Context) error {
	select {
	case <-s.done:
		return fmt.Errorf("http server: %w", s.err) // never ErrServerClosed: only shutdownHTTP makes that
	case <-ctx.Done():
		return nil
	}
}

// shutdownHTTP shuts the HTTP server down, giving the requests in flight
// a few seconds, waits for Serve to return and returns its failure, if any.
func (a *App) shutdownHTTP(ctx context.Context, s *serving) error {
	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(shCtx)
	<-s.done
	if s.err != nil && !errors.Is(s.err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", s.err)
	}
	return nil
}

// start waits for Postgres (and applies or checks the migrations), then
// for Kafka, then makes sure the routed topics exist. Unreachable
// dependencies are waited for, logging, until ctx ends: a pod started
// during an outage waits, not ready, rather than crash-looping. Refused
// credentials, untrusted TLS and missing migrations end it.
func (a *App) start(ctx context.Context) error {
	if err := a.waitFor(ctx, order.DependencyPostgres, a.startPostgres, postgresFatal); err != nil {
		return err
	}
	if err := a.waitFor(ctx, order.DependencyKafka, a.kc.Ping, a.kafkaFatal); err != nil {
		return err
	}
	if err := a.ensureTopics(ctx); err != nil {
		a.log.Warn("could not ensure retry and DLQ topics; continuing", slog.String("error", err.Error()))
	}
	a.pause.Started()
	return nil
}

// startPostgres reaches Postgres and makes sure the schema is current.
func (a *App) startPostgres(ctx context.Context) error {
	if err := a.store.Ping(ctx); err != nil {
		return err
	}
	if a.cfg.MigrateOnStart {
		if err := postgres.Migrate(ctx, a.pool); err != nil {
			return fmt.Errorf("migrate on start: %w", err)
		}
	}
	pending, err := postgres.Pending(ctx, a.pool)
	if err != nil {
		return fmt.Errorf("check migrations: %w", err)
	}
	if len(pending) > 0 {
		return fmt.Errorf("migrations missing (%s): run `billing migrate` or set BILLING_MIGRATE_ON_START=true", strings.Join(pending, ", "))
	}
	return nil
}

// startAttemptTimeout bounds one attempt to reach a dependency at start.
const startAttemptTimeout = 30 * time.Second

// waitFor runs check until it succeeds, fatal says its error cannot be
// waited out, or ctx ends. Meanwhile dep is down in the pause, so /readyz
// says what the process waits for. Only an outage (an unreachable
// dependency) is waited out; any other error of check ends the start.
// Kafka's dial errors carry no type: every one that fatal lets through is
// waited out.
func (a *App) waitFor(ctx context.Context, dep order.Dependency, check func(context.Context) error, fatal func(error) error) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, startAttemptTimeout)
		err := check(actx)
		cancel()
		if err == nil {
			a.pause.Resume(dep)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ferr := fatal(err); ferr != nil {
			return ferr
		}
		if dep != order.DependencyKafka && order.Classify(err) != order.ClassOutage {
			return err
		}
		a.pause.Outage(dep, err)
		a.log.Warn("waiting for "+string(dep), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		t := time.NewTimer(a.policy.Startup.Delay(attempt - 1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// postgresFatal names the variable when Postgres refuses our credentials,
// the database is missing or its certificate is not trusted: waiting does
// not fix any of them (postgres.Misconfigured, which billing migrate uses
// too).
func postgresFatal(err error) error {
	if why := postgres.Misconfigured(err); why != "" {
		return fmt.Errorf("postgres: %s: check BILLING_DATABASE_URL", why)
	}
	return nil
}

// kafkaFatal: wrong credentials or TLS trust stop the program at once with
// a line naming the variables (never their values).
func (a *App) kafkaFatal(err error) error {
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, kafkago.SASLAuthenticationFailed), errors.Is(err, kafkago.IllegalSASLState),
		errors.Is(err, kafkago.UnsupportedSASLMechanism):
		return fmt.Errorf("kafka: SASL authentication failed for user %q: check BILLING_KAFKA_SASL_USERNAME, BILLING_KAFKA_SASL_PASSWORD and BILLING_KAFKA_SASL_MECHANISM", a.cfg.KafkaSASLUsername)
	case errors.As(err, &certErr):
		return fmt.Errorf("kafka: TLS certificate not trusted (%w): check BILLING_KAFKA_TLS_CA_FILE", certErr.Err)
	}
	return nil
}

// consume runs one consumer per topic (the main one and each tier) until
// ctx ends or one fails, which stops the others; each drains and makes its
// final commit before the readers and the writer close.
func (a *App) consume(ctx context.Context) error {
	consumers, closeAll, err := a.newConsumers(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	a.log.Info("billing started", slog.String("topic", a.cfg.KafkaTopic), slog.String("group", a.cfg.KafkaGroupID),
		slog.Int("max_in_flight", a.cfg.MaxInFlight), slog.String("http", a.ln.Addr().String()))
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range consumers {
		g.Go(func() error { return c.Run(gctx) })
	}
	return g.Wait()
}

// newConsumers builds the consumers of the main topic and the tiers, and a
// function that closes their readers and the routing writer. Readers are
// built here rather than in New: a group reader joins its group at once,
// and a process that is still waiting for Postgres must not hold partitions.
func (a *App) newConsumers(ctx context.Context) ([]*kafkain.Consumer, func(), error) {
	cfg := a.cfg
	writer, closeWriter := a.kc.NewWriter()
	routes := kafkain.Routes{Group: cfg.KafkaGroupID, DLQTopic: cfg.KafkaDLQTopic, Policy: a.policy}
	for i := range cfg.RetryDelays {
		routes.RetryTopics = append(routes.RetryTopics, cfg.RetryTopic(i+1))
	}
	router := kafkain.NewRouter(kafkain.NewClientWriter(writer), routes, a.Metrics, a.pause, a.log)
	handler := kafkain.NewOrderConfirmedHandler(a.billing, cfg.DefaultCurrency, kafkain.WithTracerProvider(a.tune.Tracer))

	var (
		consumers []*kafkain.Consumer
		sources   []*kafkain.GroupSource
	)
	closeAll := func() {
		for _, src := range sources {
			if err := src.Close(); err != nil {
				a.log.Warn("close consumer group", slog.String("error", err.Error()))
			}
		}
		if err := closeWriter(); err != nil {
			a.log.Warn("close writer", slog.String("error", err.Error()))
		}
	}
	for _, s := range a.sources(ctx) {
		src, err := kafkain.NewGroupSource(a.kc.ReaderConfig(s.topic, s.group, a.tune.Reader))
		if err != nil { // only a configuration NewGroupSource rejects
			closeAll()
			return nil, nil, fmt.Errorf("consume %s: %w", s.topic, err)
		}
		sources = append(sources, src)
		consumers = append(consumers, kafkain.NewConsumer(src, handler, router, a.pause, a.Metrics, a.log,
			kafkain.Options{
				Tier:           s.tier,
				MaxInFlight:    cfg.MaxInFlight,
				CommitInterval: a.tune.CommitInterval,
				DrainTimeout:   cfg.ShutdownTimeout,
				RevokeTimeout:  a.tune.Reader.RebalanceTimeout / 2, // 0: the default, under the default rebalance timeout
			}))
	}
	return consumers, closeAll, nil
}

// ensureTopics creates the retry tiers, the DLQ and the invoice topic with
// as many partitions as the main topic, so that routed records keep their
// key's order.
func (a *App) ensureTopics(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	parts, err := a.kc.Partitions(ctx, a.cfg.KafkaTopic)
	if err != nil {
		return err
	}
	n := parts[a.cfg.KafkaTopic]
	if n == 0 {
		n = 1
	}
	// Routed records carry the original value plus headers: the tiers and
	// the DLQ must take whatever the main topic took (CONTRACT §5).
	mainMax, err := a.kc.MaxMessageBytes(ctx, a.cfg.KafkaTopic)
	if err != nil {
		a.log.Warn("main topic's max.message.bytes unknown", slog.String("error", err.Error()))
	}
	least := kafkaclient.RoutedMaxMessageBytes(mainMax)
	specs := []kafkaclient.TopicSpec{{Name: a.cfg.KafkaDLQTopic, Partitions: n, MinMaxMessageBytes: least}}
	for i := range a.cfg.RetryDelays {
		specs = append(specs, kafkaclient.TopicSpec{Name: a.cfg.RetryTopic(i + 1), Partitions: n, MinMaxMessageBytes: least})
	}
	if a.cfg.PublishEvents {
		// As many partitions as the main topic, so that consumers of both
		// can scale alike (CONTRACT §9).
		specs = append(specs, kafkaclient.TopicSpec{Name: a.cfg.KafkaInvoiceTopic, Partitions: n})
	}
	return a.kc.EnsureTopics(ctx, specs)
}

// lagLoop publishes billing_consumer_lag and billing_consumer_committed_offset
// for the main topic and the tiers.
func (a *App) lagLoop(ctx context.Context) {
	t := time.NewTicker(a.tune.LagInterval)
	defer t.Stop()
	for {
		a.updateLag(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *App) updateLag(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	groups := map[string]string{a.cfg.KafkaTopic: a.cfg.KafkaGroupID}
	for i := range a.cfg.RetryDelays {
		groups[a.cfg.RetryTopic(i+1)] = a.cfg.KafkaGroupID + ".retry." + strconv.Itoa(i+1)
	}
	for topic, group := range groups {
		pos, err := a.kc.Positions(ctx, group, topic)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Debug("lag unavailable", slog.String("topic", topic), slog.String("error", err.Error()))
			}
			continue
		}
		for p, v := range pos {
			part := strconv.Itoa(p)
			a.Metrics.ConsumerLag.WithLabelValues(topic, part).Set(float64(v.Lag))
			a.Metrics.ConsumerCommitted.WithLabelValues(topic, part).Set(float64(v.Committed))
		}
	}
	// DLQ depth from the brokers: sticky, unlike a rate of dead letters.
	if n, err := a.kc.Records(ctx, a.cfg.KafkaDLQTopic); err == nil {
		a.Metrics.DLQRecords.WithLabelValues(a.cfg.KafkaDLQTopic).Set(float64(n))
	}
}
