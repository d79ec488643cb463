package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/acme/billing/core/order"
)

// Part is a set of the configuration's parts: what a command reads.
type Part uint8

// The parts of Config, one per embedded struct.
const (
	PartKafka Part = 1 << iota
	PartDatabase
	PartGateway
	PartRules
	PartService
	PartLog

	// AllParts is the whole configuration, what `billing run` reads.
	AllParts = PartKafka | PartDatabase | PartGateway | PartRules | PartService | PartLog
)

// String names the parts of p: "Database+Rules".
func (p Part) String() string {
	partNames := [...]string{"Kafka", "Database", "Gateway", "Rules", "Service", "Log"} // Config's order
	var names []string
	for i, n := range partNames {
		if p&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// part is one part of a Config: its bit, a pointer to it, and its own
// rules beyond the bounds.
type part struct {
	part     Part
	ptr      any
	validate func() error
}

// parts lists c's parts in declaration order.
func (c *Config) parts() []part {
	return []part{
		{PartKafka, &c.Kafka, c.Kafka.validate},
		{PartDatabase, &c.Database, c.Database.validate},
		{PartGateway, &c.Gateway, c.Gateway.validate},
		{PartRules, &c.Rules, c.Rules.validate},
		{PartService, &c.Service, c.Service.validate},
		{PartLog, &c.Log, c.Log.validate},
	}
}

var hostPortRE = regexp.MustCompile(`^[^\s:/]+:[0-9]{1,5}$`)

func (k Kafka) validate() error {
	if len(k.KafkaBrokers) == 0 {
		return &Error{"BILLING_KAFKA_BROKERS", "required, comma-separated host:port"}
	}
	for _, b := range k.KafkaBrokers {
		if !hostPortRE.MatchString(strings.TrimSpace(b)) {
			return &Error{"BILLING_KAFKA_BROKERS", fmt.Sprintf("%q is not host:port", b)}
		}
	}
	for _, v := range []struct{ name, value string }{
		{"BILLING_KAFKA_TOPIC", k.KafkaTopic}, {"BILLING_KAFKA_GROUP_ID", k.KafkaGroupID},
		{"BILLING_KAFKA_RETRY_TOPIC_PREFIX", k.KafkaRetryTopicPrefix}, {"BILLING_KAFKA_DLQ_TOPIC", k.KafkaDLQTopic},
		{"BILLING_KAFKA_CLIENT_ID", k.KafkaClientID}, {"BILLING_KAFKA_INVOICE_TOPIC", k.KafkaInvoiceTopic},
	} {
		if strings.TrimSpace(v.value) == "" {
			return &Error{v.name, "must not be empty"}
		}
	}
	if err := k.validateTopics(); err != nil {
		return err
	}
	switch strings.ToLower(k.KafkaSASLMechanism) {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.KafkaSASLUsername == "" {
			return &Error{"BILLING_KAFKA_SASL_USERNAME", "required when BILLING_KAFKA_SASL_MECHANISM is set"}
		}
	default:
		return &Error{"BILLING_KAFKA_SASL_MECHANISM", fmt.Sprintf("%q is not plain, scram-sha-256 or scram-sha-512", k.KafkaSASLMechanism)}
	}
	if k.KafkaTLSCAFile != "" {
		if _, err := os.Stat(k.KafkaTLSCAFile); err != nil {
			return &Error{"BILLING_KAFKA_TLS_CA_FILE", "cannot be read"}
		}
	}
	return nil
}

func (d Database) validate() error {
	if strings.TrimSpace(d.DatabaseURL.Reveal()) == "" {
		return &Error{"BILLING_DATABASE_URL", "required"}
	}
	return nil
}

// The payment providers of BILLING_PAYMENT_PROVIDER (docs/interface.md §6).
const (
	ProviderGeneric = "generic"
	ProviderStripe  = "stripe"
)

func (g Gateway) validate() error {
	switch strings.ToLower(g.PaymentProvider) {
	case ProviderGeneric, "": // "": a Config built in code, as Normalize leaves it
		return validateGenericURL(g.PaymentBaseURL)
	case ProviderStripe:
		if err := validateStripeKey(g.StripeAPIKey); err != nil {
			return err
		}
		return validateStripeBase(g.StripeAPIBase)
	default:
		return &Error{"BILLING_PAYMENT_PROVIDER", fmt.Sprintf("%q is not generic or stripe", g.PaymentProvider)}
	}
}

// validateGenericURL checks BILLING_PAYMENT_BASE_URL, which the generic
// provider requires.
func validateGenericURL(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return &Error{"BILLING_PAYMENT_BASE_URL", "required with BILLING_PAYMENT_PROVIDER=generic"}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &Error{"BILLING_PAYMENT_BASE_URL", "must be an absolute http(s) URL"}
	}
	// User info is sent as basic authentication with every charge: over
	// plain HTTP anyone on the path reads the gateway's credentials.
	if _, hasPass := u.User.Password(); u.Scheme == "http" && (u.User.Username() != "" || hasPass) {
		return &Error{"BILLING_PAYMENT_BASE_URL", "has credentials (user info) over plain http: use https"}
	}
	return nil
}

// maxStripeKeyBytes bounds BILLING_STRIPE_API_KEY: Stripe's keys are about
// a hundred characters, and the key goes into a header of every request.
const maxStripeKeyBytes = 255

// validateStripeKey checks BILLING_STRIPE_API_KEY without ever quoting it:
// a secret (sk_) or restricted (rk_) key, printable ASCII. A publishable
// key (pk_) is the usual mistake: it cannot create a charge.
func validateStripeKey(key Secret) error {
	k := key.Reveal()
	switch {
	case k == "":
		return &Error{"BILLING_STRIPE_API_KEY", "required with BILLING_PAYMENT_PROVIDER=stripe"}
	case len(k) > maxStripeKeyBytes:
		return &Error{"BILLING_STRIPE_API_KEY", fmt.Sprintf("longer than %d bytes", maxStripeKeyBytes)}
	case !strings.HasPrefix(k, "sk_") && !strings.HasPrefix(k, "rk_"):
		return &Error{"BILLING_STRIPE_API_KEY", "is not a secret (sk_…) or restricted (rk_…) key"}
	}
	for i := range len(k) {
		if k[i] <= ' ' || k[i] > '~' {
			return &Error{"BILLING_STRIPE_API_KEY", "has a character other than printable ASCII"}
		}
	}
	return nil
}

// validateStripeBase checks BILLING_STRIPE_API_BASE: https, or plain http
// to a loopback address only (stripe-mock in tests), since the key goes
// with every request; and no user info, which Stripe does not take.
func validateStripeBase(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &Error{"BILLING_STRIPE_API_BASE", "must be an absolute http(s) URL"}
	}
	if u.User != nil {
		return &Error{"BILLING_STRIPE_API_BASE", "must not carry user info: the key is BILLING_STRIPE_API_KEY"}
	}
	if u.Scheme == "http" {
		host := u.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return &Error{"BILLING_STRIPE_API_BASE", "plain http only to a loopback address: the API key goes with every request"}
		}
	}
	return nil
}

func (r Rules) validate() error {
	// The completer resumes a pending invoice after PendingResumeAfter and
	// holds it once its key is past half of GatewayKeyTTL; at most a quarter
	// of the TTL leaves its back-off (internal/service/completer.Options) at least
	// as long again to retry before the invoice needs a person.
	if r.PendingResumeAfter > r.GatewayKeyTTL/4 {
		return &Error{"BILLING_PENDING_RESUME_AFTER", fmt.Sprintf("%s must be at most a quarter of BILLING_GATEWAY_KEY_TTL (%s)",
			formatDuration(r.PendingResumeAfter), formatDuration(r.GatewayKeyTTL))}
	}
	return nil
}

func (s Service) validate() error {
	if !order.ValidCurrency(s.DefaultCurrency) {
		return &Error{"BILLING_DEFAULT_CURRENCY", "must be 3 upper-case letters"}
	}
	return nil
}

func (l Log) validate() error {
	switch strings.ToLower(l.LogLevel) {
	case "debug", "info", "warn", "error":
		return nil
	default:
		return &Error{"BILLING_LOG_LEVEL", fmt.Sprintf("%q is not debug, info, warn or error", l.LogLevel)}
	}
}
