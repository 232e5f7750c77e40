package obs

import (
	"context"
	"testing"

	"github.com/lockkit/lockkit/telemetry"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// rig is Instruments over an in-memory span exporter and a manual metric reader.
type rig struct {
	in     *Instruments
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func newRig(t *testing.T, o Options, traceOpts ...sdktrace.TracerProviderOption) *rig {
	t.Helper()
	r := &rig{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSyncer(r.spans)}, traceOpts...)...)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	if o.TracerProvider == nil {
		o.TracerProvider = r.tp
	}
	if o.MeterProvider == nil {
		o.MeterProvider = mp
	}
	in, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.in = in
	return r
}

// span returns the one ended span named name.
func (r *rig) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range r.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want 1 span %q, got %d (all: %v)", name, len(found), spanNames(r.spans.GetSpans()))
	}
	return found[0]
}

func spanNames(ss tracetest.SpanStubs) []string {
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	return names
}

// metrics collects and returns the metrics of lockkit's scope, by name.
func (r *rig) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName || sm.Scope.Version != telemetry.Version {
			t.Errorf("metric scope = %q %q, want %q %q", sm.Scope.Name, sm.Scope.Version, telemetry.ScopeName, telemetry.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks that kvs hold exactly want (by key and value).
func wantAttrs(t *testing.T, what string, kvs []attribute.KeyValue, want ...attribute.KeyValue) {
	t.Helper()
	got := attrMap(kvs)
	for _, w := range want {
		v, ok := got[w.Key]
		if !ok {
			t.Errorf("%s: attribute %s missing (have %v)", what, w.Key, kvs)
			continue
		}
		if v != w.Value {
			t.Errorf("%s: %s = %v, want %v", what, w.Key, v.Emit(), w.Value.Emit())
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: attributes %v, want exactly %v", what, kvs, want)
	}
}

// hasAttr reports whether kvs carry key.
func hasAttr(kvs []attribute.KeyValue, key attribute.Key) bool {
	_, ok := attrMap(kvs)[key]
	return ok
}

// dataPoints returns the (int or float) sum points or histogram points of m, keyed by
// the attribute set's encoding "domain/outcome" or "domain/cause".
type point struct {
	count uint64  // histograms
	sum   float64 // histograms: sum; sums and gauges: value
}

func points(t *testing.T, m metricdata.Metrics) map[string]point {
	t.Helper()
	key := func(s attribute.Set) string {
		var parts string
		for _, kv := range s.ToSlice() {
			if parts != "" {
				parts += ","
			}
			parts += string(kv.Key) + "=" + kv.Value.Emit()
		}
		return parts
	}
	out := map[string]point{}
	switch d := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = point{count: p.Count, sum: p.Sum}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = point{count: p.Count, sum: float64(p.Sum)}
		}
	case metricdata.Sum[int64]:
		if !d.IsMonotonic {
			t.Errorf("%s: counter is not monotonic", m.Name)
		}
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = point{sum: float64(p.Value)}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out[key(p.Attributes)] = point{sum: float64(p.Value)}
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return out
}

func isChildOf(child, parent tracetest.SpanStub) bool {
	return child.Parent.SpanID() == parent.SpanContext.SpanID() && child.Parent.TraceID() == parent.SpanContext.TraceID()
}

// startParent starts a request span on the rig's provider, as an application would.
func (r *rig) startParent(ctx context.Context) (context.Context, trace.Span) {
	return r.tp.Tracer("app").Start(ctx, "request")
}
