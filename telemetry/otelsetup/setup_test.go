package otelsetup

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/telnames"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

const childEnv = "LOCKKIT_OTELSETUP_CHILD"

// inChild runs test name alone in a child process (Setup installs global
// providers, which would leak into the other tests), with the OTEL_*
// environment removed and env added, and fails t if the child fails.
func inChild(t *testing.T, name string, env ...string) {
	t.Helper()
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
}

// lifecycle records what the runtime records for one Do on dom: acquire after a
// retry, one renewal, release.
func lifecycle(ctx context.Context, dom *obs.Domain) {
	ctx, hold := dom.StartHold(ctx, "lock:{table:42}")
	hold.StartAcquire(ctx)
	hold.Retry(1, time.Millisecond, telnames.OutcomeContended)
	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true, Fence: 9})
	_, rn := hold.StartRenew(ctx)
	rn.End(telnames.OutcomeOK, nil)
	_, rel := hold.StartRelease(ctx)
	rel.End(telnames.OutcomeReleased, nil)
	hold.End(telnames.OutcomeReleased, nil)
}

func TestReadEnv(t *testing.T) {
	for _, tc := range []struct {
		name            string
		env             map[string]string
		traces, metrics bool
		err             string
	}{
		{name: "nothing set"},
		{name: "common endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, traces: true, metrics: true},
		{name: "traces endpoint only", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, traces: true},
		{name: "metrics endpoint only", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:4318/v1/metrics"}, metrics: true},
		{name: "metrics exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_METRICS_EXPORTER": "none"}, traces: true},
		{name: "traces exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, metrics: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "otlp"}, traces: true, metrics: true},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "TRUE"}},
		{name: "http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, traces: true, metrics: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": only http/protobuf`},
		{name: "signal protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}, traces: true, metrics: true},
		{name: "zipkin exporter", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := readEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.traces != tc.traces || cfg.metrics != tc.metrics {
				t.Errorf("traces, metrics = %v, %v; want %v, %v", cfg.traces, cfg.metrics, tc.traces, tc.metrics)
			}
		})
	}
}

func clearOTELEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}

// TestSetupWithoutEndpoint: nothing configured, nothing changed.
func TestSetupWithoutEndpoint(t *testing.T) {
	clearOTELEnv(t)
	tp, mp, prop := otel.GetTracerProvider(), otel.GetMeterProvider(), otel.GetTextMapPropagator()
	if ExportConfigured() {
		t.Error("ExportConfigured with no endpoint")
	}
	shutdown, err := Setup(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("no-op shutdown: %v", err)
	}
	if otel.GetTracerProvider() != tp || otel.GetMeterProvider() != mp || otel.GetTextMapPropagator() != prop {
		t.Error("Setup without an endpoint changed the global providers")
	}
}

// TestSetupBadEnv: an unsupported protocol is an error, and the globals stay.
func TestSetupBadEnv(t *testing.T) {
	clearOTELEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	tp := otel.GetTracerProvider()
	if ExportConfigured() {
		t.Error("ExportConfigured with an invalid environment")
	}
	if _, err := Setup(context.Background(), "svc"); err == nil {
		t.Fatal("Setup accepted OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
	}
	if otel.GetTracerProvider() != tp {
		t.Error("a failed Setup changed the global tracer provider")
	}
}

// TestSetupExports runs Setup in a child process (it installs global providers, which
// would leak into the other tests) against a fake OTLP/HTTP receiver, and checks
// what arrives: the resource's service name, lockkit's spans and metrics.
func TestSetupExports(t *testing.T) {
	if os.Getenv(childEnv) == "TestSetupExports" {
		setupChild(t)
		return
	}
	for _, tc := range []struct {
		name        string
		env         []string
		wantService string
	}{
		{"service name argument", nil, "setup-test"},
		{"OTEL_SERVICE_NAME wins", []string{"OTEL_SERVICE_NAME=from-env"}, "from-env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rx := &otlpReceiver{}
			srv := httptest.NewServer(rx)
			defer srv.Close()

			inChild(t, "TestSetupExports", append(tc.env, "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL)...)

			rx.mu.Lock()
			defer rx.mu.Unlock()
			if !slices.Contains(rx.services, tc.wantService) || len(slices.Compact(slices.Clone(rx.services))) != 1 {
				t.Errorf("service names %v, want only %q", rx.services, tc.wantService)
			}
			slices.Sort(rx.spans)
			if want := []string{"lockkit.acquire table", "lockkit.hold table", "lockkit.release table", "lockkit.renew table"}; !slices.Equal(rx.spans, want) {
				t.Errorf("spans %v, want %v", rx.spans, want)
			}
			for _, m := range []string{telnames.MetricAcquireDuration, telnames.MetricHoldDuration, telnames.MetricRenewals, telnames.MetricReleases} {
				if !slices.Contains(rx.metrics, m) {
					t.Errorf("metric %s not exported (got %v)", m, rx.metrics)
				}
			}
			if rx.contentType != "application/x-protobuf" {
				t.Errorf("content type %q", rx.contentType)
			}
		})
	}
}

func setupChild(t *testing.T) {
	// Instruments created before Setup must follow the providers it installs.
	in, err := obs.New(obs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !ExportConfigured() {
		t.Fatal("ExportConfigured = false with an endpoint set")
	}
	ctx := context.Background()
	shutdown, err := Setup(ctx, "setup-test")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("global tracer provider is %T", otel.GetTracerProvider())
	}
	lifecycle(ctx, in.Domain("table"))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// otlpReceiver is a minimal OTLP/HTTP endpoint that records what it is sent.
type otlpReceiver struct {
	mu          sync.Mutex
	services    []string
	spans       []string
	metrics     []string
	contentType string
}

func (rx *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rx.mu.Lock()
	defer rx.mu.Unlock()
	rx.contentType = r.Header.Get("Content-Type")
	var resp proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.ResourceSpans {
			rx.services = append(rx.services, serviceName(rs.Resource))
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					rx.spans = append(rx.spans, s.Name)
				}
			}
		}
		resp = &coltracepb.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var req colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rm := range req.ResourceMetrics {
			rx.services = append(rx.services, serviceName(rm.Resource))
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					rx.metrics = append(rx.metrics, m.Name)
				}
			}
		}
		resp = &colmetricpb.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	b, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func serviceName(r *resourcepb.Resource) string {
	for _, kv := range r.GetAttributes() {
		if kv.Key == "service.name" {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestSetupRefusesBadPassedOnVariables: values the SDK would panic on
// (a negative queue or batch size) or the exporter would read without end
// (a certificate path of /dev/zero) are Setup errors naming the variable,
// returned at once, and the globals are left alone.
func TestSetupRefusesBadPassedOnVariables(t *testing.T) {
	bigPEM := filepath.Join(t.TempDir(), "big.pem")
	if err := os.WriteFile(bigPEM, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, value, want string }{
		{"OTEL_BSP_MAX_QUEUE_SIZE", "-1", "OTEL_BSP_MAX_QUEUE_SIZE=\"-1\": want a whole number"},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=\"-1\""},
		{"OTEL_BSP_SCHEDULE_DELAY", "soon", "OTEL_BSP_SCHEDULE_DELAY=\"soon\""},
		{"OTEL_METRIC_EXPORT_INTERVAL", "0", "OTEL_METRIC_EXPORT_INTERVAL=\"0\""},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "99999999999", "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/dev/zero", "not a regular file"},
		{"OTEL_EXPORTER_OTLP_CLIENT_KEY", bigPEM, "larger than"},
		{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/nonexistent/ca.pem", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: stat /nonexistent/ca.pem"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearOTELEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(c.name, c.value)
			tp := otel.GetTracerProvider()
			done := make(chan error, 1)
			go func() {
				_, err := Setup(context.Background(), "svc")
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("Setup with %s=%s: %v, want an error containing %q", c.name, c.value, err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Setup with %s=%s did not return", c.name, c.value)
			}
			if otel.GetTracerProvider() != tp {
				t.Error("a failed Setup changed the global tracer provider")
			}
		})
	}
	// The batch cannot be larger than the queue it is taken from.
	clearOTELEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "10")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "20")
	if _, err := Setup(context.Background(), "svc"); err == nil || !strings.Contains(err.Error(), "larger than OTEL_BSP_MAX_QUEUE_SIZE") {
		t.Errorf("batch 20 > queue 10: %v", err)
	}
}

// TestSetupPrometheus: OTEL_METRICS_EXPORTER=prometheus serves lockkit's
// metrics at OTEL_EXPORTER_PROMETHEUS_HOST:PORT/metrics, in Prometheus's text
// format, with no OTLP endpoint set; shutdown stops the server. It runs in a
// child process (Setup installs global providers).
func TestSetupPrometheus(t *testing.T) {
	if os.Getenv(childEnv) == "TestSetupPrometheus" {
		prometheusChild(t)
		return
	}
	inChild(t, "TestSetupPrometheus", "OTEL_METRICS_EXPORTER=prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT="+freePort(t))
}

func prometheusChild(t *testing.T) {
	in, err := obs.New(obs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !ExportConfigured() {
		t.Fatal("ExportConfigured = false with OTEL_METRICS_EXPORTER=prometheus")
	}
	ctx := context.Background()
	shutdown, err := Setup(ctx, "setup-test")
	if err != nil {
		t.Fatal(err)
	}
	lifecycle(ctx, in.Domain("table"))
	url := "http://127.0.0.1:" + os.Getenv("OTEL_EXPORTER_PROMETHEUS_PORT") + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"lockkit_acquire_duration_seconds_bucket{",
		`lockkit_domain="table"`,
		"lockkit_releases_total{",
		`service_name="setup-test"`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("/metrics still served after shutdown")
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}
