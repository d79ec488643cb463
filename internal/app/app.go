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
	"go.opentelemetry.io/otel/trace"

	kafkain "github.com/acme/billing/adapters/in/kafka"
	httpgateway "github.com/acme/billing/adapters/out/http"
	kafkapub "github.com/acme/billing/adapters/out/kafka"
	"github.com/acme/billing/adapters/out/stripe"
	"github.com/acme/billing/core/order"
	kafkaclient "github.com/acme/billing/infra/kafka"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/config"
	"github.com/acme/billing/internal/health"
	"github.com/acme/billing/internal/metrics"
	"github.com/acme/billing/internal/service"
	"github.com/acme/billing/internal/service/completer"
	"github.com/acme/billing/internal/service/maintainer"
	"github.com/acme/billing/internal/service/relay"
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
	// GateInterval is the interval of the release gate's checks of the
	// groups (0: 3s); SwitchInterval that of the reads of the consumption
	// switch (0: 2s). Both bound how soon every pod stops consuming.
	GateInterval, SwitchInterval time.Duration
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
	gateway Gateway
	pause   *health.Pause
	maint   *maintainer.Maintainer
	srv     *http.Server
	ln      net.Listener
	pending *completer.Completer
	billing *order.BillingService // the consumers' and the completer's
	relay   *relay.Relay          // nil when BILLING_PUBLISH_EVENTS=false

	// The reasons to stop consuming that keep the pod ready: the
	// operator's switch (switchLoop) and the release gate.
	hold     *kafkain.Hold
	gate     *kafkain.ReleaseGate
	pausedBy int64 // the id of the operator's pause the metrics show

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
	metrics.RegisterBuildInfo(a.reg, metrics.BuildInfo{Version: version.Release, Revision: bi.Revision, GoVersion: bi.GoVersion,
		Schema: postgres.Schema(), RunsBeside: version.RunsBeside})
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
	if a.tune.SwitchInterval == 0 {
		a.tune.SwitchInterval = 2 * time.Second
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
	a.store = postgres.NewStore(pool, postgres.WithEvents(cfg.PublishEvents),
		postgres.WithGroupObserver(func(op string, n int) {
			a.Metrics.DBGroupEvents.WithLabelValues(op).Observe(float64(n))
		}))
	a.onClose(a.store.Close) // its grouped statements' goroutines, before the pool closes
	dedup, err := postgres.NewDedupMaintenance(pool, postgres.DedupOptions{
		Retention: cfg.DedupRetention, Metrics: a.Metrics.Maintenance()})
	if err != nil {
		return nil, err
	}
	a.maint = maintainer.New(dedup, maintainer.Options{Logger: log})

	a.kc, err = kafkaclient.NewCluster(KafkaSettings(cfg))
	if errors.Is(err, kafkaclient.ErrSASLCredentials) {
		return nil, fmt.Errorf("%w: check BILLING_KAFKA_SASL_USERNAME and BILLING_KAFKA_SASL_PASSWORD", err)
	}
	if err != nil {
		return nil, err
	}
	a.gateway, err = NewGateway(cfg, log, a.Metrics, tune)
	if err != nil {
		return nil, err
	}
	a.onClose(a.gateway.CloseIdleConnections)

	a.pause = health.NewPause(a.Metrics.Outage(), log)
	a.pause.SetProbe(order.DependencyPostgres, a.store.Ping)
	a.pause.SetProbe(order.DependencyKafka, a.kc.Ping)
	terms := order.NewAttemptTerms(cfg.PaymentTimeout, cfg.GatewayKeyTTL)
	a.hold = kafkain.NewHold(a.Metrics.Hold(), log)
	describe, closeDescribe := a.kc.GroupDescriber()
	a.onClose(closeDescribe)
	a.gate = kafkain.NewReleaseGate(kafkain.DescribeWith(describe), a.hold, kafkain.GateOptions{
		Groups:     a.groups(),
		RunsBeside: version.RunsBeside,
		Quiet:      terms.Life,
		Every:      tune.GateInterval,
	}, log)

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

	a.billing = order.NewBillingService(a.store, a.gateway, cfg.KafkaGroupID, order.WithAttemptTerms(terms))
	a.pending = completer.New(a.store, a.billing, completer.Options{ResumeAfter: cfg.PendingResumeAfter, Logger: log,
		Metrics: a.Metrics.Completer(), Paused: a.hold.Held})
	if cfg.PublishEvents {
		writer, closeWriter := a.kc.NewWriter()
		a.onClose(func() {
			if err := closeWriter(); err != nil {
				log.Warn("close the invoice events' writer", slog.String("error", err.Error()))
			}
		})
		a.relay = relay.New(a.store, kafkapub.NewPublisher(writer, cfg.KafkaInvoiceTopic), relay.Options{
			Logger: log, Metrics: a.Metrics.Relay()})
	}
	return a, nil
}

// Gateway is what billing needs of a payment adapter, whichever provider:
// charges, and the provider's records for reconciliation.
type Gateway interface {
	order.PaymentGateway
	order.PaymentRecords
	CloseIdleConnections()
}

// NewGateway builds the payment adapter BILLING_PAYMENT_PROVIDER names:
// the generic client at BILLING_PAYMENT_BASE_URL, or Stripe's at
// BILLING_STRIPE_API_BASE with BILLING_STRIPE_API_KEY. Both share the
// request engine (httpgateway.Caller): timeout, breaker, metrics, tracing.
// m may be nil (a command whose metrics nobody scrapes).
func NewGateway(cfg config.Config, log *slog.Logger, m *metrics.Metrics, tune Tuning) (Gateway, error) {
	opts := []httpgateway.Option{
		httpgateway.WithIdleConns(max(cfg.MaxInFlight, 2)),
		httpgateway.WithLogger(log),
		httpgateway.WithTracerProvider(tune.Tracer),
		httpgateway.WithTLSConfig(tune.GatewayTLS),
	}
	if m != nil {
		opts = append(opts, httpgateway.WithMetrics(m.Gateway()))
	}
	if cfg.PaymentProvider == config.ProviderStripe {
		c, err := stripe.New(cfg.StripeAPIBase, cfg.StripeAPIKey.Reveal(), cfg.PaymentTimeout, opts)
		if err != nil {
			return nil, fmt.Errorf("payment client: %w", err)
		}
		return c, nil
	}
	c, err := httpgateway.NewClient(cfg.PaymentBaseURL, cfg.PaymentTimeout, opts...)
	if err != nil {
		return nil, fmt.Errorf("payment client: %w", err)
	}
	return c, nil
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

// Handler returns the HTTP handler of /metrics, /healthz and /readyz, and
// of /debug/pprof/ when BILLING_PPROF is on.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	if a.cfg.Pprof {
		handlePprof(mux)
	}
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

// start waits for Postgres (and applies or checks the migrations, and
// reads the consumption switch), then for Kafka, then makes sure the
// routed topics exist and looks at the groups' members (the release gate).
// Unreachable dependencies are waited for, logging, until ctx ends: a pod
// started during an outage waits, not ready, rather than crash-looping.
// Refused credentials, untrusted TLS and missing migrations end it. Once
// it returns, the switch and the gate say whether the process may consume
// and send keys: a pod started while paused never fetches.
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
	a.gate.Prime(ctx)
	a.pause.Started()
	return nil
}

// startPostgres reaches Postgres and makes sure the schema is current.
func (a *App) startPostgres(ctx context.Context) error {
	if err := a.store.Ping(ctx); err != nil {
		return err
	}
	if a.cfg.MigrateOnStart {
		// On a pool of its own: the service's may be of one connection,
		// and a no-transaction migration needs two.
		// A database that could not be rolled back afterwards is a
		// person's decision: `billing migrate --allow-no-rollback`.
		refuse := func(applied []postgres.AppliedMigration) string {
			return version.RollbackRefusal(postgres.SchemaBefore(applied, version.Release))
		}
		if err := postgres.MigrateURL(ctx, a.cfg.DatabaseURL.Reveal(), postgres.WithMigrateLog(a.log), postgres.WithRefusal(refuse)); err != nil {
			if refused, ok := errors.AsType[*postgres.RefusedError](err); ok {
				return fmt.Errorf("migrate on start: %s; run billing migrate --allow-no-rollback to migrate anyway", refused.Reason)
			}
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
	return a.readSwitch(ctx)
}

// startAttemptTimeout bounds one attempt to reach a dependency at start.
const startAttemptTimeout = 30 * time.Second

// StartupBackoff spaces the attempts to reach a dependency when a process
// starts (`billing run`, `billing migrate --wait`): long enough not to
// hammer a dependency that is down, short enough that a pod is ready soon
// after it comes back.
func StartupBackoff() order.Backoff {
	return order.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
}

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
		if !service.Sleep(ctx, StartupBackoff().Delay(attempt-1)) {
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
	case kafkaclient.SASLRefused(err):
		return fmt.Errorf("kafka: SASL authentication failed for user %q: check BILLING_KAFKA_SASL_USERNAME, BILLING_KAFKA_SASL_PASSWORD and BILLING_KAFKA_SASL_MECHANISM", a.cfg.KafkaSASLUsername)
	case errors.As(err, &certErr):
		return fmt.Errorf("kafka: TLS certificate not trusted (%w): check BILLING_KAFKA_TLS_CA_FILE", certErr.Err)
	}
	return nil
}

// newConsumers builds the consumers of the main topic and the tiers, and a
// function that closes their groups and the routing writer. Each joins its
// group (announcing this release, kafkain.WithAnnouncement) once the hold
// is open, and leaves it while consumption is held.
func (a *App) newConsumers(ctx context.Context) ([]*kafkain.Consumer, func(), error) {
	cfg := a.cfg
	writer, closeWriter := a.kc.NewWriter()
	routes := kafkain.Routes{Group: cfg.KafkaGroupID, DLQTopic: cfg.KafkaDLQTopic, Policy: a.policy}
	for i := range cfg.RetryDelays {
		routes.RetryTopics = append(routes.RetryTopics, cfg.RetryTopic(i+1))
	}
	router := kafkain.NewRouter(kafkain.NewClientWriter(writer), routes, a.Metrics.Router(), a.pause, a.log)
	handler := kafkain.NewOrderConfirmedHandler(a.billing, cfg.DefaultCurrency, kafkain.WithTracerProvider(a.tune.Tracer))

	var (
		consumers []*kafkain.Consumer
		sources   []*kafkain.GroupSource
	)
	// One budget for what every reader of the process decodes and every
	// event it holds (docs/design.md, "Memory"): twice the largest batch
	// the readers decompress.
	readers := a.tune.Reader
	readers.MaxBatchBytes = int(cfg.KafkaMaxBatchBytes)
	readers.Budget = kafkain.NewMemoryBudget(2*int64(cfg.KafkaMaxBatchBytes), a.Metrics.Budget())
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
		a.Metrics.AttemptWaits.WithLabelValues(s.topic) // exported at 0 from the consumer's start
		src, err := kafkain.NewClusterSource(a.kc.Access(), s.topic, s.group, readers,
			kafkain.WithAnnouncement(kafkain.Announcement{Release: version.Release, RunsBeside: version.RunsBeside}))
		if err != nil { // only a configuration NewGroupSource rejects
			closeAll()
			return nil, nil, fmt.Errorf("consume %s: %w", s.topic, err)
		}
		sources = append(sources, src)
		consumers = append(consumers, kafkain.NewConsumer(src, handler, router, a.pause, a.Metrics.Consumer(), a.log,
			kafkain.Options{
				Tier:           s.tier,
				MaxInFlight:    cfg.MaxInFlight,
				CommitInterval: a.tune.CommitInterval,
				DrainTimeout:   cfg.ShutdownTimeout,
				RevokeTimeout:  a.tune.Reader.RebalanceTimeout / 2, // 0: the default, under the default rebalance timeout
				Hold:           a.hold,
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
	// the DLQ must take whatever the main topic took (docs/interface.md §5).
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
		// can scale alike (docs/interface.md §9).
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
		groups[a.cfg.RetryTopic(i+1)] = tierGroup(a.cfg.KafkaGroupID, i+1)
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
