package obs

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockkit/lockkit/internal/telnames"

	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

const childEnv = "LOCKKIT_TELEMETRY_CHILD"

// inChild reports whether this process is the child run of test name. Otherwise
// it runs that test alone in a child process (tests that install global providers
// would leak them into the others), with the OTEL_* environment removed and env
// added, and fails t if the child fails.
func inChild(t *testing.T, name string, env ...string) bool {
	t.Helper()
	if os.Getenv(childEnv) == name {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, childEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"="+name)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name+" ") {
		t.Fatalf("child did not run %s:\n%s", name, out)
	}
	return false
}

// TestFollowsGlobalProviders: Instruments on the global providers are off until a
// provider is installed, then record to it, and follow a replacement.
func TestFollowsGlobalProviders(t *testing.T) {
	if !inChild(t, "TestFollowsGlobalProviders") {
		return
	}
	ctx := context.Background()
	in, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dom := in.Domain("table")
	if _, h := dom.StartHold(ctx, testKey); h != nil {
		t.Fatal("telemetry on before any provider is installed")
	}

	type sdk struct {
		spans  *tracetest.InMemoryExporter
		reader *sdkmetric.ManualReader
	}
	install := func() sdk {
		s := sdk{tracetest.NewInMemoryExporter(), sdkmetric.NewManualReader()}
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(s.spans)))
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader)))
		return s
	}
	renewals := func(s sdk) int64 {
		var rm metricdata.ResourceMetrics
		if err := s.reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == telnames.MetricRenewals {
					for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
						n += p.Value
					}
				}
			}
		}
		return n
	}

	a := install()
	lifecycle(ctx, dom)
	if n := len(a.spans.GetSpans()); n != 4 {
		t.Errorf("first provider got %d spans, want 4", n)
	}
	if n := renewals(a); n != 1 {
		t.Errorf("first provider counted %d renewals, want 1", n)
	}

	b := install()
	lifecycle(ctx, dom)
	if n := len(b.spans.GetSpans()); n != 4 {
		t.Errorf("replacement provider got %d spans, want 4", n)
	}
	if n := len(a.spans.GetSpans()); n != 4 {
		t.Errorf("first provider got %d spans after its replacement, want still 4", n)
	}
	if n := renewals(b); n != 1 {
		t.Errorf("replacement provider counted %d renewals, want 1", n)
	}

	otel.SetTracerProvider(tracenoop.NewTracerProvider())
	otel.SetMeterProvider(metricnoop.NewMeterProvider())
	if _, h := dom.StartHold(ctx, testKey); h != nil {
		t.Error("telemetry on with no-op global providers")
	}
	if allocs := testing.AllocsPerRun(100, func() { lifecycle(ctx, dom) }); allocs != 0 {
		t.Errorf("lifecycle with no-op global providers allocates %v times", allocs)
	}
}
