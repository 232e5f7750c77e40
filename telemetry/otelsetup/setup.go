// Package otelsetup wires OpenTelemetry export for applications: Setup installs
// OTLP/HTTP trace and metric exporters, configured from the standard OTEL_*
// environment variables, as the global providers that lockkit's instrumentation
// follows by default.
//
// It is the one lockkit package that links the OpenTelemetry SDK, its OTLP
// exporters and protobuf. The runtime (package lockkit), generated code and
// package telemetry import only the OpenTelemetry API, so a service that sets up
// OpenTelemetry its own way, or not at all, never links what this package does.
// Import it from a main package:
//
//	shutdown, err := otelsetup.Setup(ctx, "booking-service")
//	...
//	defer shutdown(ctx) // flushes pending spans and metrics
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Setup configures OpenTelemetry export for an application (and lockkit's examples)
// from the standard environment variables, and installs the result as the global
// tracer provider, meter provider and propagator, which lockkit uses by default.
//
// Traces are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, through a batch span processor; metrics
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set,
// through a periodic reader. The exporters read the rest of OTEL_EXPORTER_OTLP_*
// themselves (headers, timeout, TLS, compression), the SDK reads OTEL_TRACES_SAMPLER,
// OTEL_BSP_* and OTEL_METRIC_EXPORT_INTERVAL; Setup checks those numbers and
// the certificate paths first, and returns an error naming a bad one (the SDK
// would panic on a negative size, and a certificate path such as /dev/zero
// would be read without end). OTEL_TRACES_EXPORTER or
// OTEL_METRICS_EXPORTER set to "none" turns that signal off.
//
// OTEL_METRICS_EXPORTER=prometheus serves the metrics for a Prometheus scrape
// instead, at http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics
// (defaults localhost and 9464, as the OpenTelemetry specification names
// them), through the OpenTelemetry Prometheus exporter; shutdown stops the
// server. No OTLP endpoint is needed for it. Only the
// http/protobuf protocol is supported: another OTEL_EXPORTER_OTLP_*PROTOCOL is an
// error. The resource has service.name = serviceName, overridden by
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. The propagator is W3C trace
// context and baggage.
//
// When no endpoint is set, or OTEL_SDK_DISABLED=true, Setup changes nothing (the
// globals stay no-op, so lockkit's instrumentation costs next to nothing) and returns
// a shutdown that does nothing; ExportConfigured tells the caller in advance, for
// example to print a summary instead.
//
// The returned shutdown flushes pending spans and metrics and stops the exporters;
// call it before the program exits, with a ctx bounding how long it may take.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	cfg, err := readEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	if !cfg.traces && !cfg.metrics && cfg.prometheus == "" {
		return func(context.Context) error { return nil }, nil
	}

	opts := []resource.Option{resource.WithTelemetrySDK()}
	if serviceName != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(serviceName)))
	}
	// Later detectors win: the environment overrides serviceName.
	opts = append(opts, resource.WithFromEnv())
	res, err := resource.New(ctx, opts...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("otelsetup: resource: %w", err)
	}
	res, err = resource.Merge(resource.Default(), res)
	if err != nil {
		return nil, fmt.Errorf("otelsetup: resource: %w", err)
	}

	var shutdowns []func(context.Context) error
	shutdown = func(ctx context.Context) error {
		var errs []error
		for _, f := range shutdowns {
			errs = append(errs, f(ctx))
		}
		return errors.Join(errs...)
	}

	var tp *sdktrace.TracerProvider
	if cfg.traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otelsetup: OTLP trace exporter: %w", err)
		}
		tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		shutdowns = append(shutdowns, tp.Shutdown)
	}
	var mp *sdkmetric.MeterProvider
	switch {
	case cfg.prometheus != "":
		reader, stop, err := servePrometheus(cfg.prometheus)
		if err != nil {
			return nil, errors.Join(err, shutdown(ctx))
		}
		mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
		shutdowns = append(shutdowns, mp.Shutdown, stop)
	case cfg.metrics:
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("otelsetup: OTLP metric exporter: %w", err), shutdown(ctx))
		}
		mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		shutdowns = append(shutdowns, mp.Shutdown)
	}

	// Install only once everything was created, so a failed Setup leaves the globals alone.
	if tp != nil {
		otel.SetTracerProvider(tp)
	}
	if mp != nil {
		otel.SetMeterProvider(mp)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return shutdown, nil
}

// ExportConfigured reports whether Setup, in the current environment, would
// configure any export (an OTLP endpoint is set and the SDK is not disabled). It
// returns false, too, when the environment is invalid, for which Setup returns the
// error.
func ExportConfigured() bool {
	cfg, err := readEnv(os.Getenv)
	return err == nil && (cfg.traces || cfg.metrics || cfg.prometheus != "")
}

type envConfig struct {
	traces, metrics bool
	// prometheus is the host:port to serve /metrics on, when
	// OTEL_METRICS_EXPORTER=prometheus.
	prometheus string
}

func readEnv(getenv func(string) string) (envConfig, error) {
	var cfg envConfig
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return cfg, nil
	}
	var err error
	if cfg.traces, err = signalEnabled(getenv, "TRACES"); err != nil {
		return cfg, err
	}
	if strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")) == "prometheus" {
		if cfg.prometheus, err = prometheusAddr(getenv); err != nil {
			return cfg, err
		}
	} else if cfg.metrics, err = signalEnabled(getenv, "METRICS"); err != nil {
		return cfg, err
	}
	if cfg.traces || cfg.metrics {
		if err := checkPassedOn(getenv); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Variables the SDK and the exporters read themselves. Setup checks them
// first: the SDK panics on a negative queue or batch size, and the
// exporters read a certificate path without a limit (OTEL_EXPORTER_OTLP_CERTIFICATE=/dev/zero
// hangs), so a bad value is an error here, naming the variable.
var (
	positiveIntVars = []string{
		"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
		"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT",
		"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
	}
	fileVars = []string{
		"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
		"OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
	}
)

// maxPEMFile bounds a certificate or key file: PEM files are kilobytes.
const maxPEMFile = 1 << 20

func checkPassedOn(getenv func(string) string) error {
	for _, name := range positiveIntVars {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n <= 0 {
			return fmt.Errorf("otelsetup: %s=%q: want a whole number from 1 to %d (milliseconds for delays and timeouts)", name, v, math.MaxInt32)
		}
	}
	if q, b := getenv("OTEL_BSP_MAX_QUEUE_SIZE"), getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"); q != "" && b != "" {
		qn, _ := strconv.Atoi(strings.TrimSpace(q))
		bn, _ := strconv.Atoi(strings.TrimSpace(b))
		if bn > qn {
			return fmt.Errorf("otelsetup: OTEL_BSP_MAX_EXPORT_BATCH_SIZE=%d is larger than OTEL_BSP_MAX_QUEUE_SIZE=%d; a batch is taken from the queue", bn, qn)
		}
	}
	for _, name := range fileVars {
		path := getenv(name)
		if path == "" {
			continue
		}
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			return fmt.Errorf("otelsetup: %s: %w", name, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("otelsetup: %s=%q: not a regular file (want a PEM file)", name, path)
		case fi.Size() > maxPEMFile:
			return fmt.Errorf("otelsetup: %s=%q: %d bytes, larger than %d; want a PEM file", name, path, fi.Size(), maxPEMFile)
		}
	}
	return nil
}

// signalEnabled reads the variables of one signal (TRACES or METRICS).
func signalEnabled(getenv func(string) string, signal string) (bool, error) {
	endpoint := getenv("OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT")
	if endpoint == "" {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" {
		return false, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_" + signal + "_EXPORTER")); exporter {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		if signal == "METRICS" {
			return false, fmt.Errorf("otelsetup: OTEL_%s_EXPORTER=%q: only otlp, prometheus and none are supported", signal, exporter)
		}
		return false, fmt.Errorf("otelsetup: OTEL_%s_EXPORTER=%q: only otlp and none are supported", signal, exporter)
	}
	name := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	protocol := getenv(name)
	if protocol == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		protocol = getenv(name)
	}
	if protocol != "" && protocol != "http/protobuf" {
		return false, fmt.Errorf("otelsetup: %s=%q: only http/protobuf is supported", name, protocol)
	}
	return true, nil
}
