package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockkit/lockkit/telemetry"
)

// The runtime's logger: every line logged with a ctx carries trace_id and span_id.
func ExampleNewLogHandler() {
	logger := slog.New(telemetry.NewLogHandler(slog.NewTextHandler(os.Stdout, nil)))
	logger.InfoContext(context.Background(), "lease lost", "domain", "table")
}

// Catalog lists every name lockkit records: for dashboards, alerts and
// documentation that must not drift from the code.
func ExampleCatalog() {
	for _, e := range telemetry.Catalog() {
		if e.Kind == telemetry.KindMetric {
			fmt.Printf("%s (%s, %s)\n", e.Name, e.Type, e.Unit)
		}
	}
	// Output:
	// lockkit.acquire.duration (histogram, s)
	// lockkit.acquire.attempts (histogram, {attempt})
	// lockkit.acquire.contended (counter, {acquire})
	// lockkit.hold.duration (histogram, s)
	// lockkit.renewals (counter, {renewal})
	// lockkit.leases.lost (counter, {lease})
	// lockkit.releases (counter, {release})
	// lockkit.breaker.status (gauge, {state})
}

// With KeyHashed, spans carry the key's hash: compute it to find one key's
// spans in Jaeger (search by the tag lockkit.key=<hash>). It is the first 32
// hex digits of `printf %s 'lock:{user:42:digest}' | openssl dgst -sha256
// -hmac secret`.
func ExampleHashKey() {
	fmt.Println(telemetry.HashKey("lock:{user:42:digest}", []byte("secret")))
	fmt.Println(len(telemetry.HashKey("lock:{user:42:digest}", nil)))
	// Output:
	// 480e970ba4161d9d4122fbfa2fd6cc7b
	// 32
}

// LogAttrs gives a log line the trace and span ids of ctx, for a logger that
// is not wrapped by NewLogHandler.
func ExampleLogAttrs() {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("app").Start(context.Background(), "book")
	defer span.End()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == telemetry.LogTraceID || a.Key == telemetry.LogSpanID {
				return slog.String(a.Key, "…") // ids vary from run to run
			}
			return a
		},
	}))
	logger.LogAttrs(ctx, slog.LevelInfo, "booked", telemetry.LogAttrs(ctx)...)
	// Output:
	// time=… level=INFO msg=booked trace_id=… span_id=…
}
