package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// prometheusAddr reads OTEL_EXPORTER_PROMETHEUS_HOST and _PORT (defaults
// localhost and 9464, from the OpenTelemetry specification).
func prometheusAddr(getenv func(string) string) (string, error) {
	host := strings.TrimSpace(getenv("OTEL_EXPORTER_PROMETHEUS_HOST"))
	if host == "" {
		host = "localhost"
	}
	port := strings.TrimSpace(getenv("OTEL_EXPORTER_PROMETHEUS_PORT"))
	if port == "" {
		port = "9464"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("otelsetup: OTEL_EXPORTER_PROMETHEUS_PORT=%q: want a port number from 0 to 65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// servePrometheus starts the /metrics server on addr with its own registry,
// and returns the reader to give the meter provider and the server's stop.
func servePrometheus(addr string) (sdkmetric.Reader, func(context.Context) error, error) {
	reg := prometheus.NewRegistry()
	reader, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, fmt.Errorf("otelsetup: Prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("otelsetup: Prometheus exporter: listening on %s (OTEL_EXPORTER_PROMETHEUS_HOST/PORT): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func(ctx context.Context) error {
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("otelsetup: Prometheus exporter: %w", err)
		}
		return nil
	}
	return reader, stop, nil
}
