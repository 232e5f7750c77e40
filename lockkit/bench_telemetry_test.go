package lockkit

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkDoTelemetry is the cost of lockkit's instrumentation on an
// uncontended Do with an empty fn, against one real redis-server:
//
//   - uninstrumented: the client's telemetry removed (c.tel = nil, test-only),
//     the baseline: the same loop as an uninstrumented build would run;
//   - noprovider: the default, the global OpenTelemetry providers left as they
//     are when nothing is installed;
//   - sdk: the OpenTelemetry SDK, every span sampled, a batch span processor
//     over an exporter that discards, and a meter provider with a reader;
//   - sdk_traces: sdk without the meter provider (metrics stay no-op);
//   - sdk_syncer: sdk with a synchronous span processor, for comparison;
//   - sdk_floor: the uninstrumented client's Do wrapped by hand in the three
//     spans a Do must produce (hold, with acquire and release as children),
//     bare: no attributes, no events, no metrics, same SDK setup as sdk. No
//     instrumentation that meets the span contract can cost less than this.
//
// Run them together, so they share the machine's state:
//
//	go test -run '^$' -bench DoTelemetry -benchmem -count 6 ./lockkit/
//
// or, for figures that survive a machine whose speed drifts (the README's):
//
//	scripts/benchpair.sh -r 16 -n 10000 ./lockkit DoTelemetry/uninstrumented DoTelemetry/sdk_floor DoTelemetry/sdk
func BenchmarkDoTelemetry(b *testing.B) {
	rdb := benchRedis(b)
	run := func(b *testing.B, c *Client) {
		d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
		l := d.Key(8).Literal("bench:").String("x").Lock()
		ctx := context.Background()
		fn := func(context.Context, *Lease) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Do(ctx, fn); err != nil {
				b.Fatal(err)
			}
		}
	}
	newBenchClient := func(b *testing.B, opts ...Option) *Client {
		c, err := New(rdb, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}

	b.Run("uninstrumented", func(b *testing.B) {
		c := newBenchClient(b)
		// Domains bound from here on get a nil *telemetry.Domain, whose
		// holds are nil: no telemetry call does anything.
		c.tel = nil
		run(b, c)
	})
	b.Run("noprovider", func(b *testing.B) {
		run(b, newBenchClient(b))
	})
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(discardSpans{}),
		)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() {
			_ = tp.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
		})
		run(b, newBenchClient(b, WithTracerProvider(tp), WithMeterProvider(mp)))
	})
	// Not a configuration to deploy: the sdk case with the spans handed to
	// the exporter on the caller's goroutine instead of the batch processor's.
	// Against sdk it shows what the batch processor's per-span handoff to its
	// goroutine costs, apart from lockkit's own span and metric work.
	b.Run("sdk_traces", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(discardSpans{}),
		)
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		run(b, newBenchClient(b, WithTracerProvider(tp)))
	})
	b.Run("sdk_floor", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(discardSpans{}),
		)
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		tracer := tp.Tracer("floor")
		c := newBenchClient(b)
		c.tel = nil
		d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
		l := d.Key(8).Literal("bench:").String("x").Lock()
		b.ReportAllocs()
		for b.Loop() {
			// The spans start and end where Do's instrumentation starts and ends
			// them, relative to its Redis round trips: acquire around the SET,
			// release and hold right after the release's reply.
			ctx, hold := tracer.Start(context.Background(), "hold")
			_, acq := tracer.Start(ctx, "acquire")
			err := l.Do(ctx, func(context.Context, *Lease) error { acq.End(); return nil })
			_, rel := tracer.Start(ctx, "release")
			rel.End()
			hold.End()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sdk_syncer", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSyncer(discardSpans{}),
		)
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() {
			_ = tp.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
		})
		run(b, newBenchClient(b, WithTracerProvider(tp), WithMeterProvider(mp)))
	})
}

// discardSpans is a span exporter that drops everything.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }
