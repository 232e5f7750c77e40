package jaegertest_test

import (
	"context"
	"net/netip"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/telnames"

	"go.opentelemetry.io/otel"

	"github.com/lockkit/lockkit/internal/jaegertest"
	"github.com/lockkit/lockkit/telemetry"
	"github.com/lockkit/lockkit/telemetry/otelsetup"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// TestLoopbackOnly: every socket the Jaeger process listens on is on 127.0.0.1, and
// they are exactly the ports the test chose.
func TestLoopbackOnly(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	j := jaegertest.Start(t)

	socks, err := j.ListeningSockets()
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, s := range socks {
		if s.Addr.Addr() != loopback {
			t.Errorf("jaeger (pid %d) listens on %v, not on 127.0.0.1", j.PID(), s)
		}
		ports = append(ports, int(s.Addr.Port()))
	}
	slices.Sort(ports)
	want := slices.Sorted(slices.Values(j.Ports()))
	if !slices.Equal(ports, want) {
		t.Errorf("jaeger listens on ports %v (%v), want exactly %v", ports, socks, want)
	}

	// Cross-check with ss(8) when it is installed.
	ss, err := exec.LookPath("ss")
	if err != nil {
		t.Log("ss not installed; /proc check only")
		return
	}
	out, err := exec.Command(ss, "-H", "-ltunp").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	tag := "pid=" + strconv.Itoa(j.PID()) + ","
	var seen int
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, tag) {
			continue
		}
		seen++
		f := strings.Fields(line)
		if len(f) < 5 {
			t.Fatalf("ss line %q", line)
		}
		ap, err := netip.ParseAddrPort(f[4])
		if err != nil || ap.Addr() != loopback {
			t.Errorf("ss: jaeger listens on %q, not on 127.0.0.1: %s", f[4], line)
		}
	}
	if seen != len(want) {
		t.Errorf("ss shows %d listening sockets for pid %d, want %d:\n%s", seen, j.PID(), len(want), out)
	}
}

// TestExportThroughSetup proves the whole pipeline: otelsetup.Setup from the OTEL_*
// environment, lockkit's instruments on the global providers, OTLP/HTTP into Jaeger,
// and the spans back from the query API with their names, parents, attributes and
// events.
func TestExportThroughSetup(t *testing.T) {
	j := jaegertest.Start(t)
	const service = "lockkit-jaegertest"
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", j.OTLPHTTPEndpoint())
	t.Setenv("OTEL_METRICS_EXPORTER", "none") // Jaeger takes traces only
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")

	// Instruments created before Setup follow the global providers it installs.
	in, err := obs.New(obs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	shutdown, err := otelsetup.Setup(ctx, service)
	if err != nil {
		t.Fatal(err)
	}

	ctx, req := otel.Tracer("app").Start(ctx, "request")
	hctx, hold := in.Domain("table").StartHold(ctx, "lock:{table:42}")
	hold.StartAcquire(hctx)
	hold.Retry(1, 5*time.Millisecond, telnames.OutcomeContended)
	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true, Fence: 7})
	_, book := otel.Tracer("app").Start(hctx, "book")
	book.End()
	_, rel := hold.StartRelease(hctx)
	rel.End(telnames.OutcomeReleased, nil)
	hold.End(telnames.OutcomeReleased, nil)
	req.End()

	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(flushCtx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	tr, holdSpan := j.WaitForSpan(t, service, "lockkit.hold table")
	if holdSpan.Service != service {
		t.Errorf("service = %q", holdSpan.Service)
	}
	if len(tr.Spans) != 5 {
		names := []string{}
		for _, s := range tr.Spans {
			names = append(names, s.OperationName)
		}
		t.Errorf("trace has spans %v, want request, hold, acquire, book, release", names)
	}
	reqSpan, _ := tr.Span("request")
	if holdSpan.ParentSpanID != reqSpan.SpanID {
		t.Error("hold span is not a child of the request span")
	}
	var children []string
	for _, c := range tr.Children(holdSpan.SpanID) {
		children = append(children, c.OperationName)
	}
	slices.Sort(children)
	if strings.Join(children, ",") != "book,lockkit.acquire table,lockkit.release table" {
		t.Errorf("children of the hold span = %v", children)
	}
	for k, v := range map[string]any{
		"lockkit.domain":     "table",
		"lockkit.key":        "lock:{table:42}",
		"lockkit.fence":      int64(7),
		"lockkit.outcome":    "released",
		"otel.scope.name":    telemetry.ScopeName,
		"otel.scope.version": telemetry.Version,
		"span.kind":          "internal",
	} {
		if got := holdSpan.Tags[k]; got != v {
			t.Errorf("hold span tag %s = %#v, want %#v", k, got, v)
		}
	}
	acq, _ := tr.Span("lockkit.acquire table")
	if acq.Tags["lockkit.attempts"] != int64(2) || acq.Tags["lockkit.outcome"] != "acquired" {
		t.Errorf("acquire span tags = %v", acq.Tags)
	}
	if len(acq.Events) != 1 || acq.Events[0].Name() != "lockkit.retry" ||
		acq.Events[0].Fields["lockkit.retry.attempt"] != int64(1) || acq.Events[0].Fields["lockkit.retry.backoff"] != 0.005 {
		t.Errorf("acquire span events = %+v", acq.Events)
	}
	if holdSpan.ProcessTags["telemetry.sdk.language"] != "go" {
		t.Errorf("process tags = %v", holdSpan.ProcessTags)
	}
	if got := len(j.Traces(t, service)); got != 1 {
		t.Errorf("%d traces stored, want 1", got)
	}
}
