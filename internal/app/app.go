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

	kafkain "github.com/acme/billing/adapters/in/kafka"
	payment "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/metrics"
)

// Tuning holds knobs that are not part of the public configuration but that
// tests and the demo turn to go fast.
type Tuning struct {
	Reader         kafka.ReaderOptions
	CommitInterval time.Duration
	ProbeInterval  time.Duration
	LagInterval    time.Duration
	OutageBackoff  time.Duration // first wait after an outage; doubles up to 15s
}

// App is one running billing process.
type App struct {
	cfg     config.Config
	tune    Tuning
	log     *slog.Logger
	reg     *prometheus.Registry
	Metrics *metrics.Metrics

	pool    *pgxpool.Pool
	store   *postgres.Store
	kc      *kafka.Conn
	gateway *payment.Client
	pause   *kafkain.Pause
	maint   *postgres.DedupMaintainer

	mu      sync.Mutex
	httpLn  net.Listener
	pgOK    bool
	kafkaOK bool
}

// New connects to Postgres and prepares everything Run needs. It fails when
// Postgres cannot be reached or migrations are missing (unless cfg says to
// apply them).
func New(ctx context.Context, cfg config.Config, tune Tuning, log *slog.Logger) (*App, error) {
	a := &App{cfg: cfg, tune: tune, log: log, reg: prometheus.NewRegistry()}
	a.Metrics = metrics.New(a.reg, true)
	a.Metrics.InFlight.WithLabelValues(cfg.KafkaTopic) // exported at 0 from the first scrape
	if a.tune.CommitInterval == 0 {
		a.tune.CommitInterval = 200 * time.Millisecond
	}
	if a.tune.ProbeInterval == 0 {
		a.tune.ProbeInterval = 5 * time.Second
	}
	if a.tune.LagInterval == 0 {
		a.tune.LagInterval = 15 * time.Second
	}

	pool, err := connectPostgres(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	a.pool = pool
	a.Metrics.DBPool.Watch(func() metrics.PoolStats {
		st := pool.Stat()
		return metrics.PoolStats{
			Max: st.MaxConns(), Total: st.TotalConns(), Acquired: st.AcquiredConns(),
			Acquires: st.AcquireCount(), EmptyAcquires: st.EmptyAcquireCount(), EmptyAcquireWait: st.EmptyAcquireWaitTime(),
		}
	})
	if cfg.MigrateOnStart {
		if err := postgres.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, fmt.Errorf("migrate on start: %w", err)
		}
	}
	pending, err := postgres.Pending(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("check migrations: %w", err)
	}
	if len(pending) > 0 {
		pool.Close()
		return nil, fmt.Errorf("migrations missing (%s): run `billing migrate` or set BILLING_MIGRATE_ON_START=true", strings.Join(pending, ", "))
	}
	a.store = postgres.NewStore(pool)
	a.maint, err = postgres.NewDedupMaintainer(pool, postgres.DedupOptions{
		Retention: cfg.DedupRetention, Metrics: a.Metrics, Logger: log})
	if err != nil {
		pool.Close()
		return nil, err
	}

	a.kc, err = kafka.NewConn(KafkaSettings(cfg))
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := checkKafka(ctx, a.kc, cfg, log); err != nil {
		pool.Close()
		return nil, err
	}
	a.gateway, err = payment.NewClient(cfg.PaymentBaseURL, cfg.PaymentTimeout,
		payment.WithMetrics(a.Metrics.PaymentRequests, a.Metrics.PaymentDuration),
		payment.WithIdleConns(max(cfg.MaxInFlight, 2)),
		payment.WithLogger(log))
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("payment client: %w", err)
	}
	a.pause = kafkain.NewPause(a.Metrics.ConsumerPaused, log)
	return a, nil
}

// KafkaSettings extracts the Kafka connection settings from cfg.
func KafkaSettings(cfg config.Config) kafka.Settings {
	return kafka.Settings{
		Brokers:       cfg.KafkaBrokers,
		ClientID:      cfg.KafkaClientID,
		TLS:           cfg.KafkaTLSEnabled,
		TLSCAFile:     cfg.KafkaTLSCAFile,
		SASLMechanism: cfg.KafkaSASLMechanism,
		SASLUsername:  cfg.KafkaSASLUsername,
		SASLPassword:  cfg.KafkaSASLPassword.Reveal(),
	}
}

func connectPostgres(ctx context.Context, cfg config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 1; ; attempt++ {
		pool, err := postgres.NewPool(ctx, cfg.DatabaseURL.Reveal(), cfg.DBMaxConns)
		if err == nil {
			return pool, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("connect to postgres: %w", err)
		}
		log.Warn("postgres not reachable yet, retrying", slog.Int("attempt", attempt), slog.String("error", err.Error()))
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// checkKafka makes sure the brokers answer before consuming starts. Wrong
// credentials or TLS trust stop the program at once with a line naming the
// variables (never their values); an unreachable cluster is retried for
// 30 s, as Postgres is.
func checkKafka(ctx context.Context, kc *kafka.Conn, cfg config.Config, log *slog.Logger) error {
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 1; ; attempt++ {
		err := kc.Ping(ctx)
		if err == nil {
			return nil
		}
		var certErr *tls.CertificateVerificationError
		switch {
		case errors.Is(err, kafkago.SASLAuthenticationFailed), errors.Is(err, kafkago.IllegalSASLState),
			errors.Is(err, kafkago.UnsupportedSASLMechanism):
			return fmt.Errorf("kafka: SASL authentication failed for user %q: check BILLING_KAFKA_SASL_USERNAME, BILLING_KAFKA_SASL_PASSWORD and BILLING_KAFKA_SASL_MECHANISM", cfg.KafkaSASLUsername)
		case errors.As(err, &certErr):
			return fmt.Errorf("kafka: TLS certificate not trusted (%v): check BILLING_KAFKA_TLS_CA_FILE", certErr.Err)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("kafka unreachable at %s: %w", strings.Join(cfg.KafkaBrokers, ","), err)
		}
		log.Warn("kafka not reachable yet, retrying", slog.Int("attempt", attempt), slog.String("error", err.Error()))
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
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

// Ready reports whether Kafka and Postgres were reachable at the last probe
// and consumption is not paused.
func (a *App) Ready() (bool, string) {
	a.mu.Lock()
	pgOK, kOK := a.pgOK, a.kafkaOK
	a.mu.Unlock()
	var why []string
	if !pgOK {
		why = append(why, "postgres unreachable")
	}
	if !kOK {
		why = append(why, "kafka unreachable")
	}
	if p, dep := a.pause.Paused(); p {
		why = append(why, "paused: "+dep+" unavailable")
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// HTTPAddr returns the address the HTTP server listens on, once Run started it.
func (a *App) HTTPAddr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.httpLn == nil {
		return ""
	}
	return a.httpLn.Addr().String()
}

// Run consumes until ctx ends, then drains within BILLING_SHUTDOWN_TIMEOUT,
// commits, and releases everything. It returns nil on a clean drain.
func (a *App) Run(ctx context.Context) error {
	defer a.pool.Close()
	cfg := a.cfg

	if err := a.ensureTopics(ctx); err != nil {
		a.log.Warn("could not ensure retry and DLQ topics; continuing", slog.String("error", err.Error()))
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTPAddr, err)
	}
	a.mu.Lock()
	a.httpLn = ln
	a.mu.Unlock()
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()

	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bg sync.WaitGroup
	a.probe(bgCtx)
	bg.Add(2)
	go func() { defer bg.Done(); a.probeLoop(bgCtx) }()
	go func() { defer bg.Done(); a.lagLoop(bgCtx) }()
	if err := a.maint.Start(bgCtx); err != nil {
		stopBG()
		bg.Wait()
		return err
	}

	writer, closeWriter := a.kc.NewWriter()
	routes := kafkain.Routes{Group: cfg.KafkaGroupID, RetryDelays: cfg.RetryDelaysDurations(), DLQTopic: cfg.KafkaDLQTopic}
	for i := range cfg.RetryDelays {
		routes.RetryTopics = append(routes.RetryTopics, cfg.RetryTopic(i+1))
	}
	router := kafkain.NewRouter(writer, routes, a.Metrics, a.pause, a.log)
	billing := order.NewBillingService(a.store, a.gateway, cfg.KafkaGroupID)
	handler := kafkain.NewOrderConfirmedHandler(billing, cfg.DefaultCurrency)

	type consumer struct {
		reader *kafkago.Reader
		c      *kafkain.Consumer
	}
	var consumers []consumer
	topics := append([]string{cfg.KafkaTopic}, routes.RetryTopics...)
	for tier, topic := range topics {
		group := cfg.KafkaGroupID
		if tier > 0 {
			group = cfg.KafkaGroupID + ".retry." + strconv.Itoa(tier)
		}
		r := a.kc.NewReader(topic, group, a.tune.Reader)
		consumers = append(consumers, consumer{r, kafkain.NewConsumer(r, handler, router, a.pause, a.Metrics, a.log,
			kafkain.Options{
				Tier:             tier,
				MaxInFlight:      cfg.MaxInFlight,
				CommitInterval:   a.tune.CommitInterval,
				DrainTimeout:     cfg.ShutdownTimeout,
				OutageBackoffMin: a.tune.OutageBackoff,
			})})
	}
	a.log.Info("billing started", slog.String("topic", cfg.KafkaTopic), slog.String("group", cfg.KafkaGroupID),
		slog.Int("max_in_flight", cfg.MaxInFlight), slog.String("http", ln.Addr().String()))

	errs := make(chan error, len(consumers))
	for _, c := range consumers {
		go func() { errs <- c.c.Run(ctx) }()
	}
	var runErr error
	for range consumers {
		if err := <-errs; err != nil && runErr == nil {
			runErr = err
		}
	}
	// Every consumer drained and made its final commit: release in order.
	for _, c := range consumers {
		if err := c.reader.Close(); err != nil {
			a.log.Warn("close reader", slog.String("error", err.Error()))
		}
	}
	if err := closeWriter(); err != nil {
		a.log.Warn("close writer", slog.String("error", err.Error()))
	}
	a.maint.Stop() // after the final commits, before the HTTP server and the pool
	stopBG()
	bg.Wait()
	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shCtx)
	if err := <-httpDone; err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Warn("http server", slog.String("error", err.Error()))
	}
	a.log.Info("billing stopped")
	return runErr
}

// ensureTopics creates the retry tiers and the DLQ with as many partitions
// as the main topic, so that routed records keep their key's order.
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
	// Routed records carry the original value (a bad one may exceed 1 MiB)
	// plus headers: allow more than the broker's default record size.
	cfgs := map[string]string{"max.message.bytes": strconv.Itoa(8 << 20)}
	specs := []kafka.TopicSpec{{Name: a.cfg.KafkaDLQTopic, Partitions: n, Configs: cfgs}}
	for i := range a.cfg.RetryDelays {
		specs = append(specs, kafka.TopicSpec{Name: a.cfg.RetryTopic(i + 1), Partitions: n, Configs: cfgs})
	}
	return a.kc.EnsureTopics(ctx, specs)
}

// probe checks Postgres and Kafka once. A failed probe pauses consumption;
// a good one ends a pause.
func (a *App) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pgErr := a.store.Ping(pctx)
	kErr := a.kc.Ping(pctx)
	if ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	a.pgOK, a.kafkaOK = pgErr == nil, kErr == nil
	a.mu.Unlock()
	switch {
	case pgErr != nil:
		a.pause.Outage("postgres", pgErr)
	case kErr != nil:
		a.pause.Outage("kafka", kErr)
	default:
		if p, dep := a.pause.Paused(); p && dep != "gateway" {
			a.pause.Resume("probe")
		}
	}
}

func (a *App) probeLoop(ctx context.Context) {
	t := time.NewTicker(a.tune.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.probe(ctx)
		}
	}
}

// lagLoop publishes billing_consumer_lag for the main topic and the tiers.
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
		lag, err := a.kc.Lag(ctx, group, topic)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Debug("lag unavailable", slog.String("topic", topic), slog.String("error", err.Error()))
			}
			continue
		}
		for p, v := range lag {
			a.Metrics.ConsumerLag.WithLabelValues(topic, strconv.Itoa(p)).Set(float64(v))
		}
	}
	// DLQ depth from the brokers: sticky, unlike a rate of dead letters.
	if n, err := a.kc.Records(ctx, a.cfg.KafkaDLQTopic); err == nil {
		a.Metrics.DLQRecords.WithLabelValues(a.cfg.KafkaDLQTopic).Set(float64(n))
	}
}

// FastReader returns reader settings for an in-process broker: short waits
// and timeouts so tests and the demo do not idle.
func FastReader() kafka.ReaderOptions {
	return kafka.ReaderOptions{
		MaxWait:           100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    time.Second,
		RebalanceTimeout:  time.Second,
	}
}
