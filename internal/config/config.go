// Package config is billing's configuration (docs/interface.md §2): BILLING_*
// environment variables read with envconfig into one struct per concern
// (Kafka, Database, Gateway, Rules, Service, Log). A command loads only the
// parts it needs (README.md, "Commands"), so that `billing migrate` runs
// without Kafka's or the gateway's settings and `billing dlq replay` without
// the database's; `billing run` loads them all. Each part is checked as a
// whole, every duration and count against its bounds (Bounds), and a bad
// value stops the program with one line naming the variable.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// Prefix is the environment prefix of every variable.
const Prefix = "BILLING"

// Config is the whole configuration, what `billing run` reads: one part per
// concern. A command that loads fewer parts (LoadParts) gets the others
// zero. The parts are embedded, so a field reads as cfg.KafkaTopic whatever
// part holds it.
type Config struct {
	Kafka
	Database
	Gateway
	Rules
	Service
	Log
}

// The struct tags of every part: envconfig is the variable's whole name (so
// that envconfig never falls back to the name without the prefix: a
// DATABASE_URL meant for another program is not billing's), default its
// default, required whether it must be set (required_with: with that
// BILLING_PAYMENT_PROVIDER), secret whether it is one (the
// type Secret says it too), desc its meaning. Every duration and count has
// a row in Bounds.

// Kafka is how billing reaches Kafka and names its topics: `billing run`
// and `billing dlq replay` read it.
type Kafka struct {
	KafkaBrokers          []string   `envconfig:"BILLING_KAFKA_BROKERS" required:"true" desc:"comma-separated host:port of the Kafka brokers"`
	KafkaTopic            string     `envconfig:"BILLING_KAFKA_TOPIC" default:"orders.order-confirmed.v1" desc:"main topic of OrderConfirmed events"`
	KafkaGroupID          string     `envconfig:"BILLING_KAFKA_GROUP_ID" default:"billing-order-confirmed" desc:"consumer group; also the consumer_group of processed_event rows"`
	KafkaRetryTopicPrefix string     `envconfig:"BILLING_KAFKA_RETRY_TOPIC_PREFIX" default:"billing.order-confirmed.retry" desc:"retry tier N is topic <prefix>.N"`
	RetryDelays           []Duration `envconfig:"BILLING_RETRY_DELAYS" default:"5s,1m,10m" desc:"one delay per retry tier; after the last tier a transient failure goes to the DLQ"`
	KafkaDLQTopic         string     `envconfig:"BILLING_KAFKA_DLQ_TOPIC" default:"billing.order-confirmed.dlq" desc:"dead-letter topic"`
	KafkaClientID         string     `envconfig:"BILLING_KAFKA_CLIENT_ID" default:"billing" desc:"Kafka client id"`
	KafkaTLSEnabled       bool       `envconfig:"BILLING_KAFKA_TLS_ENABLED" default:"false" desc:"connect to Kafka over TLS"`
	KafkaTLSCAFile        string     `envconfig:"BILLING_KAFKA_TLS_CA_FILE" desc:"PEM file of CAs to trust for Kafka (system roots when empty)"`
	KafkaSASLMechanism    string     `envconfig:"BILLING_KAFKA_SASL_MECHANISM" desc:"plain, scram-sha-256 or scram-sha-512; empty for none"`
	KafkaSASLUsername     string     `envconfig:"BILLING_KAFKA_SASL_USERNAME" desc:"SASL user name"`
	KafkaSASLPassword     Secret     `envconfig:"BILLING_KAFKA_SASL_PASSWORD" desc:"SASL password (never logged)"`
	KafkaInvoiceTopic     string     `envconfig:"BILLING_KAFKA_INVOICE_TOPIC" default:"billing.invoice-events.v1" desc:"where invoice events are published; created with the main topic's partition count when missing"`
	KafkaMaxBatchBytes    Bytes      `envconfig:"BILLING_KAFKA_MAX_BATCH_BYTES" default:"32MiB" desc:"the most one fetched record batch may hold once decompressed (0: the default); each record of a batch over it is dead-lettered as a stub, undecoded"`
}

// Database is how billing reaches Postgres: every command that reads or
// writes invoices reads it (run, migrate, invoice, consume, reconcile).
type Database struct {
	DatabaseURL Secret `envconfig:"BILLING_DATABASE_URL" required:"true" desc:"Postgres DSN (pgx); TLS through sslmode"`
	DBMaxConns  int    `envconfig:"BILLING_DB_MAX_CONNS" desc:"pool size; unset or 0: derived from BILLING_MAX_IN_FLIGHT"`
}

// Gateway is which payment provider billing charges through and how it
// reaches it: `billing run` and `billing reconcile` read it.
type Gateway struct {
	PaymentProvider string `envconfig:"BILLING_PAYMENT_PROVIDER" default:"generic" desc:"generic (the gateway protocol of docs/interface.md §6) or stripe (PaymentIntents)"`
	// PaymentBaseURL is a secret (its user info is the gateway's
	// credentials) kept as a plain string: Masked masks only the user info.
	PaymentBaseURL string `envconfig:"BILLING_PAYMENT_BASE_URL" required_with:"generic" secret:"true" desc:"payment gateway base URL (generic provider)"`
	StripeAPIKey   Secret `envconfig:"BILLING_STRIPE_API_KEY" required_with:"stripe" desc:"Stripe secret or restricted key, sk_… or rk_… (never logged)"`
	StripeAPIBase  string `envconfig:"BILLING_STRIPE_API_BASE" default:"https://api.stripe.com" desc:"Stripe API base URL; plain http only to a loopback address (stripe-mock)"`
}

// Rules are the terms every path that changes an invoice shares: how long
// an attempt lives, how long a key may be sent, whether a transition
// publishes its event. `billing run`, `billing invoice` and `billing
// reconcile` read them, so that a person's command draws the lines the
// pods draw.
type Rules struct {
	PaymentTimeout     time.Duration `envconfig:"BILLING_PAYMENT_TIMEOUT" default:"10s" desc:"per-request timeout of gateway calls; an attempt lives this long plus a margin"`
	PendingResumeAfter time.Duration `envconfig:"BILLING_PENDING_RESUME_AFTER" default:"15m" desc:"a pending invoice older than this is resumed by the service itself"`
	GatewayKeyTTL      time.Duration `envconfig:"BILLING_GATEWAY_KEY_TTL" default:"24h" desc:"how long the gateway keeps an Idempotency-Key; a pending invoice must be settled well within it"`
	PublishEvents      bool          `envconfig:"BILLING_PUBLISH_EVENTS" default:"true" desc:"publish invoice events (InvoiceCharged, InvoiceDeclined, InvoiceRejected, InvoiceHeld) through the outbox"`
}

// Service is the consuming process itself: only `billing run` reads it.
type Service struct {
	DefaultCurrency string        `envconfig:"BILLING_DEFAULT_CURRENCY" default:"USD" desc:"currency of events that carry none"`
	MaxInFlight     int           `envconfig:"BILLING_MAX_IN_FLIGHT" default:"64" desc:"events processed at once by one process; 1 is the sequential loop"`
	DedupRetention  time.Duration `envconfig:"BILLING_DEDUP_RETENTION" default:"168h" desc:"how long processed_event rows are kept"`
	HTTPAddr        string        `envconfig:"BILLING_HTTP_ADDR" default:":8080" desc:"address of /metrics, /healthz, /readyz"`
	MigrateOnStart  bool          `envconfig:"BILLING_MIGRATE_ON_START" default:"false" desc:"apply migrations before consuming"`
	ShutdownTimeout time.Duration `envconfig:"BILLING_SHUTDOWN_TIMEOUT" default:"25s" desc:"drain budget after SIGTERM"`
	// Pprof is a diagnostic, off unless asked for: the profiles show the
	// process's internals and a CPU profile costs CPU while it runs.
	Pprof bool `envconfig:"BILLING_PPROF" default:"false" desc:"a diagnostic: also serve net/http/pprof's /debug/pprof/ on BILLING_HTTP_ADDR (make bench turns it on); never on in production by default"`
}

// Log is how a command logs: every command that reads any configuration
// reads it.
type Log struct {
	LogLevel string `envconfig:"BILLING_LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
}

// Bounds of BILLING_KAFKA_MAX_BATCH_BYTES (why: its row in Bounds).
const (
	MinKafkaMaxBatchBytes     = 1 << 20
	MaxKafkaMaxBatchBytes     = 256 << 20
	DefaultKafkaMaxBatchBytes = 32 << 20
)

// Bytes is a size in bytes, written as a number of bytes or with a binary
// unit: 32MiB, 512KiB, 1GiB.
type Bytes int64

var bytesRE = regexp.MustCompile(`^([0-9]{1,12})(B|KiB|MiB|GiB)?$`)

// Decode implements envconfig.Decoder.
func (b *Bytes) Decode(s string) error {
	m := bytesRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return fmt.Errorf("%q is not a size (bytes, or a number with B, KiB, MiB or GiB)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return err
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m[2]]
	*b = Bytes(n << shift)
	return nil
}

// String writes b with the largest binary unit that divides it.
func (b Bytes) String() string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if b != 0 && b%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(b>>u.shift), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Duration is a time.Duration that envconfig can read inside a list.
type Duration time.Duration

// Decode implements envconfig.Decoder.
func (d *Duration) Decode(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Secret is a string that prints as "***" so it cannot leak into a log line,
// an error or a dump of the config.
type Secret string

// String masks the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "***"
}

// MarshalJSON masks the secret, so a JSON log of the config cannot leak it.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// LogValue masks the secret in log/slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Reveal returns the secret itself, for the one place that needs it.
func (s Secret) Reveal() string { return string(s) }

// Error is a configuration error naming the variable.
type Error struct {
	Var    string
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("config: %s: %s", e.Var, e.Reason) }

// Load reads the whole configuration (AllParts), what `billing run` needs.
func Load() (Config, error) { return LoadParts(AllParts) }

// LoadParts reads the parts ps of the configuration from the process
// environment, and Log with them; it validates and normalizes each. The
// other parts are left zero and their variables unread. The error, if any,
// is one line naming the variable.
func LoadParts(ps Part) (Config, error) {
	var c Config
	if ps == 0 {
		return c, nil
	}
	ps |= PartLog
	for _, p := range c.parts() {
		if ps&p.part == 0 {
			continue
		}
		if err := envconfig.Process("", p.ptr); err != nil {
			return Config{}, translateEnvconfigError(err)
		}
	}
	// Validate before Normalize, so that an error quotes the value as it was
	// written.
	if err := c.ValidateParts(ps); err != nil {
		return Config{}, err
	}
	c.NormalizeParts(ps)
	return c, nil
}

// Normalize puts values in the form the service uses (NormalizeParts of
// every part). Load calls it; a Config built in code calls it too, before
// or after Validate.
func (c *Config) Normalize() { c.NormalizeParts(AllParts) }

// NormalizeParts normalizes the parts ps: brokers without surrounding
// spaces; the SASL mechanism, provider and log level in lower case (an
// empty provider is generic); and
// DBMaxConns derived from MaxInFlight when unset (MaxInFlight is the
// Service part's: a command that loads Database without Service, which
// consumes nothing, gets the pool of the sequential loop).
func (c *Config) NormalizeParts(ps Part) {
	if ps&PartKafka != 0 {
		for i, b := range c.KafkaBrokers {
			c.KafkaBrokers[i] = strings.TrimSpace(b)
		}
		c.KafkaSASLMechanism = strings.ToLower(c.KafkaSASLMechanism)
	}
	if ps&PartDatabase != 0 && c.DBMaxConns == 0 {
		c.DBMaxConns = DefaultDBMaxConns(max(c.MaxInFlight, 1))
	}
	if ps&PartGateway != 0 {
		c.PaymentProvider = strings.ToLower(c.PaymentProvider)
		if c.PaymentProvider == "" {
			c.PaymentProvider = ProviderGeneric // a Config built in code
		}
	}
	if ps&PartLog != 0 {
		c.LogLevel = strings.ToLower(c.LogLevel)
	}
	if ps&PartKafka != 0 && c.KafkaMaxBatchBytes == 0 {
		c.KafkaMaxBatchBytes = DefaultKafkaMaxBatchBytes // a Config built in code
	}
}

// Validate reports values envconfig accepted but the service cannot use
// (ValidateParts of every part); it changes nothing.
func (c Config) Validate() error { return c.ValidateParts(AllParts) }

// ValidateParts reports the values of the parts ps that envconfig accepted
// but the service cannot use, part by part in declaration order: each
// duration and count outside its bounds (Bounds), then the part's own
// rules and relations. It changes
// nothing, and accepts a value as a person writes it (spaces around a
// broker, any case of the SASL mechanism, provider and log level,
// DBMaxConns unset), which Normalize then puts in the service's form.
func (c Config) ValidateParts(ps Part) error {
	for _, p := range c.parts() {
		if ps&p.part == 0 {
			continue
		}
		if err := checkBounds(reflect.ValueOf(p.ptr).Elem()); err != nil {
			return err
		}
		if err := p.validate(); err != nil {
			return err
		}
	}
	return nil
}

// DefaultDBMaxConns is the pool size for maxInFlight events: a few
// connections for the sequential loop, growing with in-flight up to 8. The
// store groups the reserves and settles of events that wait for the
// database (infra/postgres.Store), so hundreds of events in flight share a
// handful of connections: `make bench` measures in-flight 256 on these 8
// against a wider pool. Few connections per replica is what lets the HPA's
// replicas stay within one Postgres's max_connections (100 by default: 12
// replicas × 8).
func DefaultDBMaxConns(maxInFlight int) int {
	return min(8, maxInFlight/8+4)
}

// RetryDelaysDurations returns the retry tier delays as time.Durations.
func (k Kafka) RetryDelaysDurations() []time.Duration {
	out := make([]time.Duration, len(k.RetryDelays))
	for i, d := range k.RetryDelays {
		out[i] = time.Duration(d)
	}
	return out
}

// RetryTopic returns the topic of retry tier n (1-based).
func (k Kafka) RetryTopic(n int) string { return k.KafkaRetryTopicPrefix + "." + strconv.Itoa(n) }

var envconfigFieldRE = regexp.MustCompile(`envconfig\.Process: assigning (\S+) to \S+: converting '(.*)' to type (\S+)`)

// translateEnvconfigError rewrites envconfig's messages into one line naming
// the variable and never echoing its value (it may be a secret).
func translateEnvconfigError(err error) error {
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		return &Error{pe.KeyName, fmt.Sprintf("cannot parse as %s", pe.TypeName)}
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "required key ") {
		return &Error{strings.TrimSuffix(strings.TrimPrefix(msg, "required key "), " missing value"), "required"}
	}
	if m := envconfigFieldRE.FindStringSubmatch(msg); m != nil {
		return &Error{m[1], "cannot parse as " + m[3]}
	}
	return fmt.Errorf("config: %w", err)
}
