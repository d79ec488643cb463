package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// badValues is a value of every variable that its part rejects.
var badValues = map[string]string{
	"BILLING_KAFKA_BROKERS":            "kafka-without-port",
	"BILLING_KAFKA_TOPIC":              " ",
	"BILLING_KAFKA_GROUP_ID":           " ",
	"BILLING_KAFKA_RETRY_TOPIC_PREFIX": " ",
	"BILLING_RETRY_DELAYS":             "5s,soon",
	"BILLING_KAFKA_DLQ_TOPIC":          " ",
	"BILLING_KAFKA_CLIENT_ID":          " ",
	"BILLING_KAFKA_TLS_ENABLED":        "maybe",
	"BILLING_KAFKA_TLS_CA_FILE":        "/nonexistent/ca.pem",
	"BILLING_KAFKA_SASL_MECHANISM":     "gssapi",
	"BILLING_KAFKA_INVOICE_TOPIC":      " ",
	"BILLING_KAFKA_MAX_BATCH_BYTES":    "lots",
	"BILLING_DATABASE_URL":             " ",
	"BILLING_DB_MAX_CONNS":             "many",
	"BILLING_PAYMENT_PROVIDER":         "paypal",
	"BILLING_PAYMENT_BASE_URL":         "gateway:8080",
	"BILLING_PAYMENT_TIMEOUT":          "soon",
	"BILLING_PENDING_RESUME_AFTER":     "-1s",
	"BILLING_GATEWAY_KEY_TTL":          "-1h",
	"BILLING_PUBLISH_EVENTS":           "perhaps",
	"BILLING_DEFAULT_CURRENCY":         "usd",
	"BILLING_MAX_IN_FLIGHT":            "0",
	"BILLING_DEDUP_RETENTION":          "1m",
	"BILLING_HTTP_ADDR":                "", // any address parses; the listen fails
	"BILLING_MIGRATE_ON_START":         "yes please",
	"BILLING_SHUTDOWN_TIMEOUT":         "0s",
	"BILLING_PPROF":                    "on demand",
	"BILLING_LOG_LEVEL":                "verbose",
	// Variables whose every value is accepted.
	"BILLING_KAFKA_SASL_USERNAME": "", "BILLING_KAFKA_SASL_PASSWORD": "",
	// Read only with BILLING_PAYMENT_PROVIDER=stripe: TestStripeProvider.
	"BILLING_STRIPE_API_KEY": "", "BILLING_STRIPE_API_BASE": "",
}

// TestLoadPartsReadsOnlyItsParts: a command that loads some parts of the
// configuration starts with every other variable missing or wrong, and
// stops on a bad variable of its own parts, naming it. This is what lets
// `billing migrate` run without Kafka's or the gateway's settings and
// `billing dlq replay` without the database's (docs/interface.md §1).
func TestLoadPartsReadsOnlyItsParts(t *testing.T) {
	for _, ps := range []Part{PartDatabase, PartKafka, PartDatabase | PartRules, PartDatabase | PartRules | PartGateway, PartLog} {
		t.Run(ps.String(), func(t *testing.T) {
			for _, v := range Vars() {
				unsetenv(t, v.Name)
			}
			ps := ps | PartLog // every configured command logs
			// Only the required variables of ps are set; everything else
			// is missing or bad.
			for _, v := range Vars() {
				switch {
				case ps&v.Part != 0 && (v.Required || v.RequiredWith == ProviderGeneric):
					t.Setenv(v.Name, validRequired[v.Name])
				case ps&v.Part == 0 && badValues[v.Name] != "":
					t.Setenv(v.Name, badValues[v.Name])
				}
			}
			c, err := LoadParts(ps)
			if err != nil {
				t.Fatalf("LoadParts(%s) with the other parts missing or bad: %v", ps, err)
			}
			// The other parts are left zero.
			for _, p := range c.parts() {
				if ps&p.part == 0 && !reflect.ValueOf(p.ptr).Elem().IsZero() {
					t.Errorf("part %s read: %+v", p.part, reflect.ValueOf(p.ptr).Elem())
				}
			}
			// A bad variable of its own parts stops it, named.
			for _, v := range Vars() {
				bad, ok := badValues[v.Name]
				if ps&v.Part == 0 || !ok || bad == "" {
					continue
				}
				t.Run(v.Name, func(t *testing.T) {
					t.Setenv(v.Name, bad)
					_, err := LoadParts(ps)
					var ce *Error
					if !errors.As(err, &ce) || ce.Var != v.Name || strings.Contains(err.Error(), "\n") {
						t.Errorf("LoadParts(%s) with %s=%q: %v, want one line naming it", ps, v.Name, bad, err)
					}
				})
			}
		})
	}
}

// validRequired is a valid value of every required variable.
var validRequired = map[string]string{
	"BILLING_KAFKA_BROKERS":    "localhost:9092",
	"BILLING_DATABASE_URL":     "postgres://billing:s3cret@localhost/billing",
	"BILLING_PAYMENT_BASE_URL": "http://gateway:8080",
}

// Every variable has a bad value above (or is listed as taking any), and
// every required one a valid value: a new variable extends the tables.
func TestPartsTablesCoverEveryVariable(t *testing.T) {
	t.Parallel()
	for _, v := range Vars() {
		if _, ok := badValues[v.Name]; !ok {
			t.Errorf("%s: no entry in badValues", v.Name)
		}
		if _, ok := validRequired[v.Name]; (v.Required || v.RequiredWith == ProviderGeneric) && !ok {
			t.Errorf("%s: required, no entry in validRequired", v.Name)
		}
	}
}

// LoadParts of nothing reads nothing: `billing version` and help work with
// any environment.
func TestLoadNoParts(t *testing.T) {
	setBase(t)
	t.Setenv("BILLING_LOG_LEVEL", "verbose")
	if _, err := LoadParts(0); err != nil {
		t.Errorf("LoadParts(0) = %v, want nil", err)
	}
}

// envconfig falls back to a variable's name without the prefix when the
// prefixed one is unset: a container's DATABASE_URL meant for another
// program would be billing's database. The variables' whole names are
// their tags, so nothing but BILLING_* is read.
func TestUnprefixedVariablesAreNotRead(t *testing.T) {
	setBase(t)
	unsetenv(t, "BILLING_DATABASE_URL")
	t.Setenv("DATABASE_URL", "postgres://someone-else/db")
	t.Setenv("LOG_LEVEL", "verbose")
	t.Setenv("KAFKA_TOPIC", "someone-elses-topic")
	c, err := Load()
	var ce *Error
	if !errors.As(err, &ce) || ce.Var != "BILLING_DATABASE_URL" {
		t.Fatalf("Load() with only DATABASE_URL set: %+v, %v; want BILLING_DATABASE_URL required", c.Database, err)
	}
	t.Setenv("BILLING_DATABASE_URL", "postgres://billing/db")
	if c, err = Load(); err != nil || c.KafkaTopic != "orders.order-confirmed.v1" || c.LogLevel != "info" {
		t.Errorf("Load() = topic %q, log level %q, %v; want the defaults, not KAFKA_TOPIC and LOG_LEVEL", c.KafkaTopic, c.LogLevel, err)
	}
}

// Vars names each variable's part as Config holds it, and String names
// the parts.
func TestVarsParts(t *testing.T) {
	t.Parallel()
	var c Config
	for _, p := range c.parts() {
		typ := reflect.TypeOf(p.ptr).Elem()
		if got := p.part.String(); got != typ.Name() {
			t.Errorf("part %d is %s, holds %s", p.part, got, typ.Name())
		}
		for i := range typ.NumField() {
			name := typ.Field(i).Tag.Get("envconfig")
			if v, ok := Lookup(name); !ok || v.Part != p.part {
				t.Errorf("%s: Lookup = %+v, %v; want part %s", name, v.Part, ok, p.part)
			}
		}
	}
	if got := (PartDatabase | PartRules).String(); got != "Database+Rules" {
		t.Errorf("String = %q", got)
	}
	if len(Names()) != len(Vars()) || len(NamesOf(PartDatabase)) != 2 {
		t.Errorf("Names %d, Vars %d, NamesOf(Database) %v", len(Names()), len(Vars()), NamesOf(PartDatabase))
	}
}
