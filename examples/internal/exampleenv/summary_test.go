package exampleenv_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/telnames"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
)

// spansLikeTheRuntime records, through package telemetry as the runtime
// does, one hold of a table lock: an acquire with one retry, three
// renewals, a release; nested under an application span.
func spansLikeTheRuntime(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	in, err := obs.New(obs.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	dom := in.Domain("table")

	ctx, app := tp.Tracer("app").Start(context.Background(), "reserve table")
	ctx, hold := dom.StartHold(ctx, "lock:{table:12}")
	hold.StartAcquire(ctx)
	hold.Retry(1, 50*time.Millisecond, telnames.OutcomeContended)
	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true, Fence: 7})
	for range 3 {
		_, r := hold.StartRenew(ctx)
		r.End(telnames.OutcomeOK, nil)
	}
	_, rel := hold.StartRelease(ctx)
	rel.End(telnames.OutcomeReleased, nil)
	hold.End(telnames.OutcomeReleased, nil)
	app.End()

	// A second trace: a TryDo that found the lock held.
	_, h2 := dom.StartHold(context.Background(), "lock:{table:12}")
	h2.StartAcquire(context.Background())
	h2.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeContended, Attempts: 1, Contended: true, Err: errors.New("held")})
	h2.End(telnames.OutcomeContended, nil)
	return rec.Ended()
}

func TestWriteSummary(t *testing.T) {
	var b bytes.Buffer
	exampleenv.WriteSummary(&b, spansLikeTheRuntime(t), 100)
	got := b.String()
	t.Logf("summary:\n%s", got)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")

	// Each line: the name at its depth, the duration, the attributes.
	want := []string{
		`^spans: 9 in 2 trace\(s\); set OTEL_EXPORTER_OTLP_ENDPOINT to see them in Jaeger instead$`,
		`^trace [0-9a-f]{8}$`,
		`^  reserve table  [0-9.]+ms$`,
		`^    lockkit.hold table  [0-9.]+ms  key=lock:\{table:12\} fence=7 outcome=released$`,
		`^      lockkit.acquire table  [0-9.]+ms  attempts=2 retries=1 outcome=acquired$`,
		`^      lockkit.renew table ×3  [0-9.]+ms(\.\.[0-9.]+ms)?  outcome=ok$`,
		`^      lockkit.release table  [0-9.]+ms  outcome=released$`,
		`^trace [0-9a-f]{8}$`,
		`^  lockkit.hold table  [0-9.]+ms  key=lock:\{table:12\} outcome=contended$`,
		`^    lockkit.acquire table  [0-9.]+ms  attempts=1 outcome=contended$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i, re := range want {
		if !matches(re, lines[i]) {
			t.Errorf("line %d: %q\n  does not match %s", i+1, lines[i], re)
		}
	}
}

// Past the line limit the rest is counted, not printed.
func TestWriteSummaryLimit(t *testing.T) {
	var b bytes.Buffer
	exampleenv.WriteSummary(&b, spansLikeTheRuntime(t), 4)
	got := b.String()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 4 and the count:\n%s", len(lines), got)
	}
	// Shown: reserve table, lockkit.hold table; 7 more spans left.
	if want := "  ... 7 more span(s) not shown"; lines[4] != want {
		t.Errorf("last line %q, want %q", lines[4], want)
	}
}

func TestWriteSummaryEmpty(t *testing.T) {
	var b bytes.Buffer
	exampleenv.WriteSummary(&b, nil, 10)
	if got := b.String(); got != "spans: none recorded\n" {
		t.Errorf("%q", got)
	}
}

func matches(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }
