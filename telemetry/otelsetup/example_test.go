package otelsetup_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/lockkit/lockkit/telemetry/otelsetup"
)

// An application's main: export to the OTLP endpoint in OTEL_EXPORTER_OTLP_ENDPOINT,
// if any, and flush before exiting.
func ExampleSetup() {
	ctx := context.Background()
	shutdown, err := otelsetup.Setup(ctx, "booking-service")
	if err != nil {
		slog.Error("telemetry", "err", err)
		os.Exit(1)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = shutdown(ctx)
	}()
	if !otelsetup.ExportConfigured() {
		fmt.Println("no OTLP endpoint set: telemetry off")
	}
	// ... create the lockkit client, serve ...
}

// ExportConfigured reads the same OTEL_* variables as Setup: whether anything
// would be exported. Here, an endpoint for all signals, and then the SDK
// switched off.
func ExampleExportConfigured() {
	os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	defer os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	fmt.Println(otelsetup.ExportConfigured())

	os.Setenv("OTEL_SDK_DISABLED", "true")
	defer os.Unsetenv("OTEL_SDK_DISABLED")
	fmt.Println(otelsetup.ExportConfigured())
	// Output:
	// true
	// false
}
