package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func setBase(t *testing.T) {
	t.Helper()
	for _, n := range Names() {
		unsetenv(t, n) // isolate from the developer's environment
	}
	t.Setenv("BILLING_KAFKA_BROKERS", "localhost:9092")
	t.Setenv("BILLING_DATABASE_URL", "postgres://billing:s3cret@localhost/billing")
	t.Setenv("BILLING_PAYMENT_BASE_URL", "http://gateway:8080")
}

func TestLoadDefaults(t *testing.T) {
	setBase(t)
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.KafkaTopic, "orders.order-confirmed.v1"; got != want {
		t.Errorf("topic = %q, want %q", got, want)
	}
	if got := c.RetryDelaysDurations(); len(got) != 3 || got[0] != 5*time.Second || got[2] != 10*time.Minute {
		t.Errorf("retry delays = %v", got)
	}
	if c.MaxInFlight != 64 || c.DBMaxConns != 8 {
		t.Errorf("in-flight %d, conns %d; want 64, 8", c.MaxInFlight, c.DBMaxConns)
	}
	// An eighth of in-flight plus 4, at most 8: the store groups what waits.
	for inFlight, want := range map[int]int{1: 4, 8: 5, 16: 6, 32: 8, 64: 8, 256: 8, 10000: 8} {
		if got := DefaultDBMaxConns(inFlight); got != want {
			t.Errorf("DefaultDBMaxConns(%d) = %d, want %d", inFlight, got, want)
		}
	}
	if c.PendingResumeAfter != 15*time.Minute || c.GatewayKeyTTL != 24*time.Hour {
		t.Errorf("pending resume after %v, key TTL %v; want 15m, 24h", c.PendingResumeAfter, c.GatewayKeyTTL)
	}
	if c.RetryTopic(2) != "billing.order-confirmed.retry.2" {
		t.Errorf("retry topic = %q", c.RetryTopic(2))
	}
	if c.Pprof {
		t.Error("pprof on by default; want it off unless BILLING_PPROF asks for it")
	}
	if c.KafkaMaxBatchBytes != 32<<20 || c.KafkaMaxBatchBytes.String() != "32MiB" {
		t.Errorf("max batch bytes %d (%s), want 32MiB", c.KafkaMaxBatchBytes, c.KafkaMaxBatchBytes)
	}
	if s := c.DatabaseURL.String(); strings.Contains(s, "s3cret") {
		t.Errorf("secret printed: %q", s)
	}
}

func TestLoadRejectsBadVariables(t *testing.T) {
	cases := []struct {
		name, value, wantVar string
	}{
		{"BILLING_KAFKA_BROKERS", "", "BILLING_KAFKA_BROKERS"},
		{"BILLING_KAFKA_BROKERS", "localhost", "BILLING_KAFKA_BROKERS"},
		{"BILLING_DATABASE_URL", "", "BILLING_DATABASE_URL"},
		{"BILLING_PAYMENT_BASE_URL", "", "BILLING_PAYMENT_BASE_URL"},
		{"BILLING_PAYMENT_BASE_URL", "gateway:8080", "BILLING_PAYMENT_BASE_URL"},
		// Credentials over plain HTTP: anyone on the path reads them.
		{"BILLING_PAYMENT_BASE_URL", "http://svc:s3cret@gateway:8080", "BILLING_PAYMENT_BASE_URL"},
		{"BILLING_PAYMENT_BASE_URL", "HTTP://svc:s3cret@gateway:8080/v1", "BILLING_PAYMENT_BASE_URL"},
		{"BILLING_PAYMENT_BASE_URL", "http://s3cret@gateway:8080", "BILLING_PAYMENT_BASE_URL"},
		{"BILLING_PAYMENT_BASE_URL", "http://:s3cret@gateway:8080", "BILLING_PAYMENT_BASE_URL"},
		{"BILLING_PAYMENT_TIMEOUT", "ten seconds", "BILLING_PAYMENT_TIMEOUT"},
		{"BILLING_PAYMENT_TIMEOUT", "-1s", "BILLING_PAYMENT_TIMEOUT"},
		{"BILLING_RETRY_DELAYS", "5s,soon", "BILLING_RETRY_DELAYS"},
		{"BILLING_RETRY_DELAYS", "5s,-1m", "BILLING_RETRY_DELAYS"},
		{"BILLING_MAX_IN_FLIGHT", "-3", "BILLING_MAX_IN_FLIGHT"},
		{"BILLING_MAX_IN_FLIGHT", "0", "BILLING_MAX_IN_FLIGHT"},
		{"BILLING_MAX_IN_FLIGHT", "many", "BILLING_MAX_IN_FLIGHT"},
		{"BILLING_DB_MAX_CONNS", "-1", "BILLING_DB_MAX_CONNS"},
		{"BILLING_DEDUP_RETENTION", "1d", "BILLING_DEDUP_RETENTION"},
		{"BILLING_DEDUP_RETENTION", "1m", "BILLING_DEDUP_RETENTION"},
		{"BILLING_DEFAULT_CURRENCY", "usd", "BILLING_DEFAULT_CURRENCY"},
		{"BILLING_LOG_LEVEL", "verbose", "BILLING_LOG_LEVEL"},
		{"BILLING_KAFKA_SASL_MECHANISM", "gssapi", "BILLING_KAFKA_SASL_MECHANISM"},
		{"BILLING_KAFKA_TLS_ENABLED", "maybe", "BILLING_KAFKA_TLS_ENABLED"},
		{"BILLING_KAFKA_TLS_CA_FILE", "/nonexistent/ca.pem", "BILLING_KAFKA_TLS_CA_FILE"},
		{"BILLING_MIGRATE_ON_START", "yes please", "BILLING_MIGRATE_ON_START"},
		{"BILLING_SHUTDOWN_TIMEOUT", "0s", "BILLING_SHUTDOWN_TIMEOUT"},
		{"BILLING_PPROF", "on demand", "BILLING_PPROF"},
		{"BILLING_KAFKA_TOPIC", " ", "BILLING_KAFKA_TOPIC"},
		{"BILLING_PENDING_RESUME_AFTER", "0s", "BILLING_PENDING_RESUME_AFTER"},
		{"BILLING_PENDING_RESUME_AFTER", "12h", "BILLING_GATEWAY_KEY_TTL"},
		{"BILLING_PENDING_RESUME_AFTER", "6h1s", "BILLING_GATEWAY_KEY_TTL"}, // a quarter of the default 24h is the most
		{"BILLING_GATEWAY_KEY_TTL", "50m", "BILLING_GATEWAY_KEY_TTL"},
		{"BILLING_GATEWAY_KEY_TTL", "59m", "1h"},
		{"BILLING_GATEWAY_KEY_TTL", "-1h", "BILLING_GATEWAY_KEY_TTL"},
		{"BILLING_KAFKA_MAX_BATCH_BYTES", "1023KiB", "BILLING_KAFKA_MAX_BATCH_BYTES"},
		{"BILLING_KAFKA_MAX_BATCH_BYTES", "257MiB", "BILLING_KAFKA_MAX_BATCH_BYTES"},
		{"BILLING_KAFKA_MAX_BATCH_BYTES", "32MB", "BILLING_KAFKA_MAX_BATCH_BYTES"},
		{"BILLING_KAFKA_MAX_BATCH_BYTES", "-1MiB", "BILLING_KAFKA_MAX_BATCH_BYTES"},
		{"BILLING_KAFKA_MAX_BATCH_BYTES", "99999999999999MiB", "BILLING_KAFKA_MAX_BATCH_BYTES"},
	}
	for _, tc := range cases {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			setBase(t)
			if tc.value == "" {
				unsetenv(t, tc.name)
			} else {
				t.Setenv(tc.name, tc.value)
			}
			_, err := Load()
			if err == nil {
				t.Fatalf("Load() accepted %s=%q", tc.name, tc.value)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantVar) || strings.Contains(msg, "\n") {
				t.Errorf("error %q should be one line naming %s", msg, tc.wantVar)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error leaks the password: %q", msg)
			}
		})
	}
}

func TestSecretNeverPrints(t *testing.T) {
	setBase(t)
	t.Setenv("BILLING_DATABASE_URL", "not a url s3cret")
	t.Setenv("BILLING_KAFKA_SASL_PASSWORD", "s3cret")
	unsetenv(t, "BILLING_KAFKA_SASL_MECHANISM")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{c.KafkaSASLPassword.String(), c.DatabaseURL.String()} {
		if strings.Contains(s, "s3cret") {
			t.Errorf("secret printed: %q", s)
		}
	}
}

func TestSecretMaskedInJSONAndSlog(t *testing.T) {
	setBase(t)
	t.Setenv("BILLING_KAFKA_SASL_PASSWORD", "s3cret")
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("configuration", slog.Any("config", c))
	if strings.Contains(buf.String(), "s3cret") {
		t.Fatalf("secret in log line: %s", buf.String())
	}
	if !strings.Contains(buf.String(), "localhost:9092") {
		t.Fatalf("log line lacks the config: %s", buf.String())
	}
}

// Credentials in the gateway URL go over TLS only; a URL without them may
// be plain HTTP (a gateway reached through a sidecar, the local stub).
func TestPaymentURLCredentialsNeedTLS(t *testing.T) {
	for _, ok := range []string{"https://svc:s3cret@gateway:8443/v1", "https://s3cret@gateway", "http://gateway:8080", "http://gateway:8080/v1"} {
		setBase(t)
		t.Setenv("BILLING_PAYMENT_BASE_URL", ok)
		if _, err := Load(); err != nil {
			t.Errorf("BILLING_PAYMENT_BASE_URL=%s: %v", MaskURL(ok), err)
		}
	}
	setBase(t)
	t.Setenv("BILLING_PAYMENT_BASE_URL", "http://svc:s3cret@gateway:8080")
	_, err := Load()
	if err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("credentials over http: err = %v, want one saying https", err)
	}
}

// BILLING_KAFKA_MAX_BATCH_BYTES is a size in bytes or binary units, within
// its bounds (1 MiB to 256 MiB, both accepted).
func TestMaxBatchBytes(t *testing.T) {
	for value, want := range map[string]Bytes{
		"1MiB": 1 << 20, "1048576": 1 << 20, "256MiB": 256 << 20, "1024KiB": 1 << 20, " 64MiB ": 64 << 20,
		"33554432B": 32 << 20, "3145728": 3 << 20,
	} {
		t.Run(value, func(t *testing.T) {
			setBase(t)
			t.Setenv("BILLING_KAFKA_MAX_BATCH_BYTES", value)
			c, err := Load()
			if err != nil || c.KafkaMaxBatchBytes != want {
				t.Errorf("Load() = %d, %v; want %d", c.KafkaMaxBatchBytes, err, want)
			}
		})
	}
	for b, want := range map[Bytes]string{1 << 20: "1MiB", 3 << 30: "3GiB", 3072: "3KiB", 1536: "1536"} {
		if b.String() != want {
			t.Errorf("Bytes(%d) = %q, want %q", int64(b), b.String(), want)
		}
	}
}
