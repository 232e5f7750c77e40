package telemetry_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/lockkit/lockkit/telemetry"
)

// The runtime's logger: every line logged with a ctx carries trace_id and span_id.
func ExampleNewLogHandler() {
	logger := slog.New(telemetry.NewLogHandler(slog.NewTextHandler(os.Stdout, nil)))
	logger.InfoContext(context.Background(), "lease lost", "domain", "table")
}
