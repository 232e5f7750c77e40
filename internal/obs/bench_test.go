package obs

import (
	"context"
	"testing"

	"github.com/lockkit/lockkit/internal/telnames"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// A whole Do (hold, acquire with one retry, renew, release, end) per iteration.
//
//	go test -run '^$' -bench . -benchmem ./telemetry/

// BenchmarkLifecycleOff: no provider configured (global defaults).
func BenchmarkLifecycleOff(b *testing.B) {
	in, _ := New(Options{})
	benchLifecycle(b, in)
}

// BenchmarkLifecycleNoopProviders: no-op providers passed explicitly.
func BenchmarkLifecycleNoopProviders(b *testing.B) {
	in, _ := New(Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: noopMeterProvider()})
	benchLifecycle(b, in)
}

// BenchmarkLifecycleMetricsOnly: SDK meter provider, no tracing.
func BenchmarkLifecycleMetricsOnly(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	in, _ := New(Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: mp})
	benchLifecycle(b, in)
}

// BenchmarkLifecycleUnsampled: SDK providers, spans sampled out.
func BenchmarkLifecycleUnsampled(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	in, _ := New(Options{TracerProvider: tp, MeterProvider: mp})
	benchLifecycle(b, in)
}

// BenchmarkLifecycleOn: SDK providers, every span recorded (to a discarding exporter).
func BenchmarkLifecycleOn(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	in, _ := New(Options{TracerProvider: tp, MeterProvider: mp})
	benchLifecycle(b, in)
}

func benchLifecycle(b *testing.B, in *Instruments) {
	dom := in.Domain("table")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lifecycle(ctx, dom)
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkStartHoldOff: the one call that decides, with no provider configured.
func BenchmarkStartHoldOff(b *testing.B) {
	in, _ := New(Options{})
	dom := in.Domain("table")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, h := dom.StartHold(ctx, testKey)
		h.End(telnames.OutcomeReleased, nil)
	}
}
