package config

import (
	"reflect"
	"testing"
	"time"
)

// Validate only reports; Normalize alone rewrites values, to what Load
// returns for the same input.
func TestValidateChangesNothingNormalizeDoes(t *testing.T) {
	raw := func() Config {
		return Config{
			Kafka: Kafka{
				KafkaBrokers: []string{" localhost:9092", "kafka-2:9093 "}, KafkaTopic: "t", KafkaGroupID: "g",
				KafkaRetryTopicPrefix: "t.retry", RetryDelays: []Duration{Duration(time.Second)}, KafkaDLQTopic: "t.dlq", KafkaInvoiceTopic: "t.invoices",
				KafkaClientID: "billing", KafkaSASLMechanism: "SCRAM-SHA-512", KafkaSASLUsername: "billing",
			},
			Database: Database{DatabaseURL: "postgres://localhost/billing"},
			Gateway:  Gateway{PaymentBaseURL: "http://gateway:8080"},
			Rules:    Rules{PaymentTimeout: time.Second, PendingResumeAfter: 15 * time.Minute, GatewayKeyTTL: 24 * time.Hour},
			Service:  Service{DefaultCurrency: "USD", MaxInFlight: 64, DedupRetention: 168 * time.Hour, ShutdownTimeout: time.Second},
			Log:      Log{LogLevel: "WARN"},
		}
	}
	c := raw()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, raw()) {
		t.Errorf("Validate changed the config:\n got %+v\nwant %+v", c, raw())
	}
	c.Normalize()
	want := raw()
	want.KafkaBrokers = []string{"localhost:9092", "kafka-2:9093"}
	want.KafkaSASLMechanism, want.LogLevel, want.DBMaxConns, want.PaymentProvider = "scram-sha-512", "warn", 8, "generic"
	want.KafkaMaxBatchBytes = DefaultKafkaMaxBatchBytes
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Normalize:\n got %+v\nwant %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("normalized config rejected: %v", err)
	}
}

// Load trims, lowercases and fills DBMaxConns as before the split.
func TestLoadNormalizes(t *testing.T) {
	setBase(t)
	t.Setenv("BILLING_KAFKA_BROKERS", " localhost:9092 , kafka-2:9093")
	t.Setenv("BILLING_KAFKA_SASL_MECHANISM", "PLAIN")
	t.Setenv("BILLING_KAFKA_SASL_USERNAME", "billing")
	t.Setenv("BILLING_LOG_LEVEL", "Debug")
	t.Setenv("BILLING_MAX_IN_FLIGHT", "16")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.KafkaBrokers, []string{"localhost:9092", "kafka-2:9093"}; !reflect.DeepEqual(got, want) {
		t.Errorf("brokers = %q, want %q", got, want)
	}
	if c.KafkaSASLMechanism != "plain" || c.LogLevel != "debug" || c.DBMaxConns != 6 {
		t.Errorf("mechanism %q, log level %q, conns %d; want plain, debug, 6", c.KafkaSASLMechanism, c.LogLevel, c.DBMaxConns)
	}
}
