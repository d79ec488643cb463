// Package config is billing's configuration (CONTRACT.md §2): one struct read
// from BILLING_* environment variables with envconfig, checked as a whole so
// that a bad value stops the program with one line naming the variable.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/acme/billing/core/order"
)

// Prefix is the environment prefix of every variable.
const Prefix = "BILLING"

// Config is everything cmd/billing reads from the environment.
type Config struct {
	KafkaBrokers          []string      `envconfig:"KAFKA_BROKERS" required:"true" desc:"comma-separated host:port of the Kafka brokers"`
	KafkaTopic            string        `envconfig:"KAFKA_TOPIC" default:"orders.order-confirmed.v1" desc:"main topic of OrderConfirmed events"`
	KafkaGroupID          string        `envconfig:"KAFKA_GROUP_ID" default:"billing-order-confirmed" desc:"consumer group; also the consumer_group of processed_event rows"`
	KafkaRetryTopicPrefix string        `envconfig:"KAFKA_RETRY_TOPIC_PREFIX" default:"billing.order-confirmed.retry" desc:"retry tier N is topic <prefix>.N"`
	RetryDelays           []Duration    `envconfig:"RETRY_DELAYS" default:"5s,1m,10m" desc:"one delay per retry tier; after the last tier a transient failure goes to the DLQ"`
	KafkaDLQTopic         string        `envconfig:"KAFKA_DLQ_TOPIC" default:"billing.order-confirmed.dlq" desc:"dead-letter topic"`
	KafkaClientID         string        `envconfig:"KAFKA_CLIENT_ID" default:"billing" desc:"Kafka client id"`
	KafkaTLSEnabled       bool          `envconfig:"KAFKA_TLS_ENABLED" default:"false" desc:"connect to Kafka over TLS"`
	KafkaTLSCAFile        string        `envconfig:"KAFKA_TLS_CA_FILE" desc:"PEM file of CAs to trust for Kafka (system roots when empty)"`
	KafkaSASLMechanism    string        `envconfig:"KAFKA_SASL_MECHANISM" desc:"plain, scram-sha-256 or scram-sha-512; empty for none"`
	KafkaSASLUsername     string        `envconfig:"KAFKA_SASL_USERNAME" desc:"SASL user name"`
	KafkaSASLPassword     Secret        `envconfig:"KAFKA_SASL_PASSWORD" desc:"SASL password (never logged)"`
	DatabaseURL           Secret        `envconfig:"DATABASE_URL" required:"true" desc:"Postgres DSN (pgx); TLS through sslmode"`
	DBMaxConns            int           `envconfig:"DB_MAX_CONNS" desc:"pool size; default derived from BILLING_MAX_IN_FLIGHT"`
	PaymentBaseURL        string        `envconfig:"PAYMENT_BASE_URL" required:"true" desc:"payment gateway base URL"`
	PaymentTimeout        time.Duration `envconfig:"PAYMENT_TIMEOUT" default:"10s" desc:"per-request timeout of gateway calls"`
	DefaultCurrency       string        `envconfig:"DEFAULT_CURRENCY" default:"USD" desc:"currency of events that carry none"`
	MaxInFlight           int           `envconfig:"MAX_IN_FLIGHT" default:"64" desc:"events processed at once by one process; 1 is the sequential loop"`
	DedupRetention        time.Duration `envconfig:"DEDUP_RETENTION" default:"168h" desc:"how long processed_event rows are kept"`
	HTTPAddr              string        `envconfig:"HTTP_ADDR" default:":8080" desc:"address of /metrics, /healthz, /readyz"`
	LogLevel              string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	MigrateOnStart        bool          `envconfig:"MIGRATE_ON_START" default:"false" desc:"apply migrations before consuming"`
	ShutdownTimeout       time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"25s" desc:"drain budget after SIGTERM"`
	PendingResumeAfter    time.Duration `envconfig:"PENDING_RESUME_AFTER" default:"15m" desc:"a pending invoice older than this is resumed by the service itself"`
	GatewayKeyTTL         time.Duration `envconfig:"GATEWAY_KEY_TTL" default:"24h" desc:"how long the gateway keeps an Idempotency-Key; a pending invoice must be settled well within it"`
	PublishEvents         bool          `envconfig:"PUBLISH_EVENTS" default:"true" desc:"publish invoice events (InvoiceCharged, InvoiceDeclined, InvoiceRejected, InvoiceHeld) through the outbox"`
	KafkaInvoiceTopic     string        `envconfig:"KAFKA_INVOICE_TOPIC" default:"billing.invoice-events.v1" desc:"where invoice events are published; created with the main topic's partition count when missing"`
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

// Load reads the configuration from the process environment, validates it
// and normalizes it. The error, if any, is one line naming the variable.
func Load() (Config, error) {
	var c Config
	if err := envconfig.Process(Prefix, &c); err != nil {
		return Config{}, translateEnvconfigError(err)
	}
	// Validate before Normalize, so that an error quotes the value as it was
	// written.
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	c.Normalize()
	return c, nil
}

var hostPortRE = regexp.MustCompile(`^[^\s:/]+:[0-9]{1,5}$`)

// Normalize puts values in the form the service uses: brokers without
// surrounding spaces, the SASL mechanism and log level in lower case, and
// DBMaxConns derived from MaxInFlight when unset. Load calls it; a Config
// built in code calls it too, before or after Validate.
func (c *Config) Normalize() {
	for i, b := range c.KafkaBrokers {
		c.KafkaBrokers[i] = strings.TrimSpace(b)
	}
	c.KafkaSASLMechanism = strings.ToLower(c.KafkaSASLMechanism)
	c.LogLevel = strings.ToLower(c.LogLevel)
	if c.DBMaxConns == 0 {
		c.DBMaxConns = DefaultDBMaxConns(c.MaxInFlight)
	}
}

// Validate reports values envconfig accepted but the service cannot use; it
// changes nothing. It accepts a value as a person writes it (spaces around a
// broker, any case of the SASL mechanism and log level, DBMaxConns unset),
// which Normalize then puts in the service's form.
func (c Config) Validate() error {
	if len(c.KafkaBrokers) == 0 {
		return &Error{"BILLING_KAFKA_BROKERS", "required, comma-separated host:port"}
	}
	for _, b := range c.KafkaBrokers {
		if !hostPortRE.MatchString(strings.TrimSpace(b)) {
			return &Error{"BILLING_KAFKA_BROKERS", fmt.Sprintf("%q is not host:port", b)}
		}
	}
	for name, v := range map[string]string{
		"BILLING_KAFKA_TOPIC": c.KafkaTopic, "BILLING_KAFKA_GROUP_ID": c.KafkaGroupID,
		"BILLING_KAFKA_RETRY_TOPIC_PREFIX": c.KafkaRetryTopicPrefix, "BILLING_KAFKA_DLQ_TOPIC": c.KafkaDLQTopic,
		"BILLING_KAFKA_CLIENT_ID": c.KafkaClientID, "BILLING_KAFKA_INVOICE_TOPIC": c.KafkaInvoiceTopic,
	} {
		if strings.TrimSpace(v) == "" {
			return &Error{name, "must not be empty"}
		}
	}
	if err := c.validateTopics(); err != nil {
		return err
	}
	if len(c.RetryDelays) == 0 {
		return &Error{"BILLING_RETRY_DELAYS", "needs at least one delay"}
	}
	for _, d := range c.RetryDelays {
		if d <= 0 {
			return &Error{"BILLING_RETRY_DELAYS", "delays must be positive"}
		}
	}
	switch strings.ToLower(c.KafkaSASLMechanism) {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if c.KafkaSASLUsername == "" {
			return &Error{"BILLING_KAFKA_SASL_USERNAME", "required when BILLING_KAFKA_SASL_MECHANISM is set"}
		}
	default:
		return &Error{"BILLING_KAFKA_SASL_MECHANISM", fmt.Sprintf("%q is not plain, scram-sha-256 or scram-sha-512", c.KafkaSASLMechanism)}
	}
	if c.KafkaTLSCAFile != "" {
		if _, err := os.Stat(c.KafkaTLSCAFile); err != nil {
			return &Error{"BILLING_KAFKA_TLS_CA_FILE", "cannot be read"}
		}
	}
	u, err := url.Parse(c.PaymentBaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &Error{"BILLING_PAYMENT_BASE_URL", "must be an absolute http(s) URL"}
	}
	// User info is sent as basic authentication with every charge: over
	// plain HTTP anyone on the path reads the gateway's credentials.
	if _, hasPass := u.User.Password(); u.Scheme == "http" && (u.User.Username() != "" || hasPass) {
		return &Error{"BILLING_PAYMENT_BASE_URL", "has credentials (user info) over plain http: use https"}
	}
	if c.PaymentTimeout <= 0 {
		return &Error{"BILLING_PAYMENT_TIMEOUT", "must be positive"}
	}
	if !order.ValidCurrency(c.DefaultCurrency) {
		return &Error{"BILLING_DEFAULT_CURRENCY", "must be 3 upper-case letters"}
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 10000 {
		return &Error{"BILLING_MAX_IN_FLIGHT", fmt.Sprintf("%d is not between 1 and 10000", c.MaxInFlight)}
	}
	if c.DBMaxConns < 0 {
		return &Error{"BILLING_DB_MAX_CONNS", "must not be negative"}
	}
	if c.DedupRetention < time.Hour {
		return &Error{"BILLING_DEDUP_RETENTION", "must be at least 1h"}
	}
	if c.ShutdownTimeout <= 0 {
		return &Error{"BILLING_SHUTDOWN_TIMEOUT", "must be positive"}
	}
	if c.PendingResumeAfter <= 0 {
		return &Error{"BILLING_PENDING_RESUME_AFTER", "must be positive"}
	}
	if c.GatewayKeyTTL <= 0 {
		return &Error{"BILLING_GATEWAY_KEY_TTL", "must be positive"}
	}
	// The completer must have time for its back-off to retry a pending
	// invoice several times before the gateway forgets its key.
	if c.PendingResumeAfter >= c.GatewayKeyTTL/2 {
		return &Error{"BILLING_PENDING_RESUME_AFTER", fmt.Sprintf("%s must be under half of BILLING_GATEWAY_KEY_TTL (%s)", c.PendingResumeAfter, c.GatewayKeyTTL)}
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return &Error{"BILLING_LOG_LEVEL", fmt.Sprintf("%q is not debug, info, warn or error", c.LogLevel)}
	}
	if strings.TrimSpace(c.DatabaseURL.Reveal()) == "" {
		return &Error{"BILLING_DATABASE_URL", "required"}
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
func (c Config) RetryDelaysDurations() []time.Duration {
	out := make([]time.Duration, len(c.RetryDelays))
	for i, d := range c.RetryDelays {
		out[i] = time.Duration(d)
	}
	return out
}

// RetryTopic returns the topic of retry tier n (1-based).
func (c Config) RetryTopic(n int) string { return c.KafkaRetryTopicPrefix + "." + strconv.Itoa(n) }

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
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "required key "), " missing value")
		if !strings.HasPrefix(name, Prefix+"_") {
			name = Prefix + "_" + name
		}
		return &Error{name, "required"}
	}
	if m := envconfigFieldRE.FindStringSubmatch(msg); m != nil {
		return &Error{m[1], "cannot parse as " + m[3]}
	}
	return fmt.Errorf("config: %w", err)
}

// Names lists every environment variable of Config, in declaration order.
func Names() []string {
	t := reflect.TypeOf(Config{})
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if k := t.Field(i).Tag.Get("envconfig"); k != "" {
			out = append(out, Prefix+"_"+k)
		}
	}
	return out
}
