package telemetry_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/acme/billing/internal/telemetry"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// otelEnv sets the OTEL_* variables Setup and the exporters read to vars,
// and unsets every other one, for the rest of the test.
func otelEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
	for name, v := range vars {
		t.Setenv(name, v)
	}
}

// With no OTEL_* variable set, tracing is off: no provider, no
// exporter, and no goroutine started (no batching, no connection).
func TestSetupOffWhenUnset(t *testing.T) {
	otelEnv(t, nil)
	before := goleak.IgnoreCurrent()
	tr, err := telemetry.Setup(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if got := tr.Exporter(); got != "" {
		t.Errorf("Exporter() = %q, want none", got)
	}
	if tp := tr.TracerProvider(); tp != nil {
		t.Errorf("TracerProvider() is %T, want nil", tp)
	}
	goleak.VerifyNone(t, before)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestSetupFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		vars    map[string]string
		want    string // Exporter(); "" for off
		wantErr string // a part of the error; "" for none
	}{
		{"endpoint switches it on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp http/protobuf", ""},
		{"traces endpoint and grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "otlp grpc", ""},
		{"traces protocol overrides", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "otlp http/protobuf", ""},
		{"exporter otlp alone", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, "otlp http/protobuf", ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "", ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, "", ""},
		{"service name only", map[string]string{"OTEL_SERVICE_NAME": "billing-eu"}, "", ""},
		{"unsupported exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "", "OTEL_TRACES_EXPORTER"},
		{"unsupported protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", "OTEL_EXPORTER_OTLP_PROTOCOL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			otelEnv(t, tt.vars)
			tr, err := telemetry.Setup(context.Background(), slog.New(slog.DiscardHandler))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Setup error = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			if got := tr.Exporter(); got != tt.want {
				t.Errorf("Exporter() = %q, want %q", got, tt.want)
			}
			if _, sdk := tr.TracerProvider().(*sdktrace.TracerProvider); sdk != (tt.want != "") {
				t.Errorf("TracerProvider() is %T", tr.TracerProvider())
			}
			// Nothing was recorded, so nothing is sent: Shutdown returns
			// at once and stops the batching goroutine.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

// A failed export, which the SDK reports only through otel's global error
// handler, is a JSON line of billing's log rather than plain text on stderr.
func TestExportErrorIsLogged(t *testing.T) {
	otelEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":       "http://127.0.0.1:1", // nothing listens on port 1
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "500",
	})
	var buf syncbuf.Buffer
	tr, err := telemetry.Setup(context.Background(), slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "lost")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx) // exports the span, which fails
	var found bool
	for l := range strings.Lines(buf.String()) {
		var line struct{ Level, Msg, Error string }
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		found = found || (line.Level == "WARN" && line.Msg == "opentelemetry" && line.Error != "")
	}
	if !found {
		t.Errorf("log %q: want a warning carrying the export error", buf.String())
	}
}
