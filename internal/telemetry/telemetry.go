// Package telemetry builds billing's OpenTelemetry tracing from the
// standard OTEL_* environment variables, and the slog handler that puts the
// trace of a log call's context into its line. It is wiring: the adapters
// take a trace.TracerProvider and know nothing of exporters.
//
// Tracing is off unless the environment asks for it: with no OTEL_*
// variable set there is no exporter, no batching goroutine and no network
// traffic, and the record's W3C traceparent is still passed on to the
// gateway unchanged (docs/interface.md §3).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) does not set it.
const DefaultServiceName = "billing"

// The variables Setup reads itself; the exporters read the rest of
// OTEL_EXPORTER_OTLP_* (headers, timeout, certificates, compression), and the
// SDK reads OTEL_TRACES_SAMPLER* and OTEL_BSP_*.
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

const (
	exporterOTLP         = "otlp"
	exporterNone         = "none"
	protocolGRPC         = "grpc"
	protocolHTTPProtobuf = "http/protobuf"
)

// Tracing is the process's tracer provider and how to flush it.
type Tracing struct {
	sdk      *sdktrace.TracerProvider // nil when tracing is off
	protocol string                   // the OTLP protocol; "" when off
}

// TracerProvider returns the provider to hand to the adapters, or nil when
// tracing is off: each adapter's WithTracerProvider then records nothing and
// skips even the work a no-op provider costs (otelhttp's, per request).
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t.sdk == nil {
		return nil
	}
	return t.sdk
}

// Exporter describes the exporter, "otlp grpc" or "otlp http/protobuf", or
// returns "" when tracing is off.
func (t *Tracing) Exporter() string {
	if t.sdk == nil {
		return ""
	}
	return exporterOTLP + " " + t.protocol
}

// Shutdown exports the spans still buffered and stops the exporter; ctx
// bounds it. Call it once the consumers have drained, so that the last
// records' spans are not lost. It is a no-op when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down tracing: %w", err)
	}
	return nil
}

// Off returns Tracing switched off, for programs and tests that do not read
// the environment.
func Off() *Tracing { return &Tracing{} }

// Setup builds tracing from the OTEL_* environment variables. Tracing is on
// when OTEL_TRACES_EXPORTER is "otlp", or when it is unset and
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set;
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off. The
// specification makes otlp the default exporter, but a service that sends
// spans to localhost:4318 merely because nobody configured tracing would
// make network calls nobody asked for: hence off unless named.
//
// A value Setup cannot honour (another exporter, the http/json protocol) is
// an error naming the variable, as bad BILLING_* configuration is.
//
// When tracing is on, the SDK's own errors (a failed export, say) go to log
// as JSON lines.
func Setup(ctx context.Context, log *slog.Logger) (*Tracing, error) {
	if strings.EqualFold(env(EnvSDKDisabled), "true") {
		return Off(), nil
	}
	switch exp := strings.ToLower(env(EnvTracesExporter)); exp {
	case "":
		if env(EnvEndpoint) == "" && env(EnvTracesEndpoint) == "" {
			return Off(), nil
		}
	case exporterOTLP:
	case exporterNone:
		return Off(), nil
	default:
		return nil, fmt.Errorf("%s: %q is not supported (otlp or none)", EnvTracesExporter, exp)
	}

	protoVar, proto := EnvTracesProtocol, env(EnvTracesProtocol)
	if proto == "" {
		protoVar, proto = EnvProtocol, env(EnvProtocol)
	}
	if proto == "" {
		proto = protocolHTTPProtobuf // the specification's default
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case protocolHTTPProtobuf:
		exp, err = otlptracehttp.New(ctx)
	case protocolGRPC:
		// grpc.NewClient underneath: it dials on the first export, not here.
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s: %q is not supported (http/protobuf or grpc)", protoVar, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	// WithFromEnv comes after the default name, so OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES override it.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	// The SDK reports a failed export only through otel's process-wide error
	// handler, and its own messages through otel's process-wide logger; by
	// default both print plain text on stderr, outside the JSON log. They
	// are the one piece of otel global state billing sets (it sets no
	// global tracer provider or propagator: those are passed), once, from
	// the Setup that main calls, and only when tracing is on.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("opentelemetry", slog.String("error", err.Error()))
	}))
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{sdk: sdk, protocol: proto}, nil
}

func env(name string) string { return strings.TrimSpace(os.Getenv(name)) }
