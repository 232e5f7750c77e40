package lockkit

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockkit/lockkit/goredis"
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
	newBenchClient := func(b *testing.B, opts ...Option) *Client {
		c, err := New(goredis.New(rdb), opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	// uninstrumented is a client whose telemetry is removed: domains bound
	// from here on get a nil *obs.Domain, whose holds are nil, so no
	// telemetry call does anything.
	uninstrumented := func(b *testing.B) *Client {
		c := newBenchClient(b)
		c.tel = nil
		return c
	}
	benchLock := func(c *Client) Lock {
		d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
		return d.Key(8).Literal("bench:").String("x").Lock()
	}
	// loop runs do b.N times, each must succeed.
	loop := func(b *testing.B, do func() error) {
		b.ReportAllocs()
		for b.Loop() {
			if err := do(); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := func(b *testing.B, c *Client) {
		l := benchLock(c)
		ctx := context.Background()
		fn := func(context.Context, *Lease) error { return nil }
		loop(b, func() error { return l.Do(ctx, fn) })
	}
	// sdkTracer is an SDK tracer provider that samples every span and hands
	// them to a discarding exporter, through a batch processor or, with
	// syncer, on the caller's goroutine.
	sdkTracer := func(b *testing.B, syncer bool) *sdktrace.TracerProvider {
		processor := sdktrace.WithBatcher(discardSpans{})
		if syncer {
			processor = sdktrace.WithSyncer(discardSpans{})
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), processor)
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	sdkMeter := func(b *testing.B) *sdkmetric.MeterProvider {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		return mp
	}

	b.Run("uninstrumented", func(b *testing.B) {
		run(b, uninstrumented(b))
	})
	b.Run("noprovider", func(b *testing.B) {
		run(b, newBenchClient(b))
	})
	b.Run("sdk", func(b *testing.B) {
		run(b, newBenchClient(b, WithTracerProvider(sdkTracer(b, false)), WithMeterProvider(sdkMeter(b))))
	})
	b.Run("sdk_traces", func(b *testing.B) {
		run(b, newBenchClient(b, WithTracerProvider(sdkTracer(b, false))))
	})
	b.Run("sdk_floor", func(b *testing.B) {
		tracer := sdkTracer(b, false).Tracer("floor")
		l := benchLock(uninstrumented(b))
		// The spans start and end where Do's instrumentation starts and ends
		// them, relative to its Redis round trips: acquire around the SET,
		// release and hold right after the release's reply.
		loop(b, func() error {
			ctx, hold := tracer.Start(context.Background(), "hold")
			_, acq := tracer.Start(ctx, "acquire")
			err := l.Do(ctx, func(context.Context, *Lease) error { acq.End(); return nil })
			_, rel := tracer.Start(ctx, "release")
			rel.End()
			hold.End()
			return err
		})
	})
	// Not a configuration to deploy: the sdk case with the spans handed to
	// the exporter on the caller's goroutine instead of the batch processor's.
	// Against sdk it shows what the batch processor's per-span handoff to its
	// goroutine costs, apart from lockkit's own span and metric work.
	b.Run("sdk_syncer", func(b *testing.B) {
		run(b, newBenchClient(b, WithTracerProvider(sdkTracer(b, true)), WithMeterProvider(sdkMeter(b))))
	})
}

// discardSpans is a span exporter that drops everything.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }
