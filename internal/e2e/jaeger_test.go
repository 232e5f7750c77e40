// Package e2e holds end-to-end tests that run lockkit programs as separate
// processes against a real redis-server and a real Jaeger v2, both on
// 127.0.0.1, and check what Jaeger stored through its HTTP query API.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/jaegertest"
	"github.com/lockkit/lockkit/internal/testserver"
)

// Bounds on the subprocesses, generous for a loaded 2-core machine.
const (
	buildTimeout = 5 * time.Minute
	runTimeout   = 2 * time.Minute
	queryTimeout = 30 * time.Second
)

// TestJaegerTraces runs programs that export over OTLP/HTTP (otelsetup.Setup,
// from the OTEL_* environment) into a Jaeger bound to 127.0.0.1, then reads
// the traces back from /api/traces?service=...:
//
//   - booking: examples/booking, unchanged, as a user runs it. Its table 12
//     reservations are traces "reserve table" → "lockkit.hold table" →
//     acquire, release (and the caller's spans in between).
//   - renewer: internal/e2e/cmd/renewer, which holds a table lock past its
//     renew interval (the booking holds are too short to renew), for the
//     lockkit.renew spans.
func TestJaegerTraces(t *testing.T) {
	j := jaegertest.Start(t)
	checkLoopbackOnly(t, j)
	r := testserver.StartRedis(t)
	root := moduleRoot(t)
	bins := buildPrograms(t, root, "./examples/booking", "./internal/e2e/cmd/renewer")

	t.Run("booking", func(t *testing.T) {
		const service = "lockkit-booking-e2e"
		out := runProgram(t, bins["./examples/booking"], exportEnv(j, r, service))
		if !strings.Contains(out, "exporting traces over OTLP") {
			t.Errorf("the example did not say it exports its traces:\n%s", out)
		}
		// The four table-12 reservations, each its own trace: "reserve table"
		// (table=12) → lockkit.hold table → acquire, release.
		var reservations []jaegertest.Trace
		waitTraces(t, j, service, func(traces []jaegertest.Trace) bool {
			reservations = reservations[:0]
			for _, tr := range traces {
				if isReservation(tr, "12") {
					reservations = append(reservations, tr)
				}
			}
			return len(reservations) == 4
		})
		tr := reservations[0]
		hold, _ := holdWith(tr, "lockkit.acquire table", "lockkit.release table")
		checkHold(t, tr, hold)

		// The caller's span is the hold's parent.
		if p, ok := spanByID(tr, hold.ParentSpanID); !ok || p.OperationName != "reserve table" {
			t.Errorf("hold span's parent = %q, want the example's \"reserve table\"", p.OperationName)
		}
		acq := childNamed(tr, hold, "lockkit.acquire table")
		if acq.Tags["lockkit.outcome"] != "acquired" {
			t.Errorf("acquire outcome = %v, want acquired", acq.Tags["lockkit.outcome"])
		}
		if n, _ := acq.Tags["lockkit.attempts"].(int64); n < 1 {
			t.Errorf("acquire attempts = %v", acq.Tags["lockkit.attempts"])
		}
		for _, e := range acq.Events {
			if e.Name() != "lockkit.retry" {
				t.Errorf("acquire event %q, want only lockkit.retry", e.Name())
				continue
			}
			if _, ok := e.Fields["lockkit.retry.attempt"].(int64); !ok {
				t.Errorf("retry event without lockkit.retry.attempt: %v", e.Fields)
			}
			if _, ok := e.Fields["lockkit.retry.backoff"].(float64); !ok {
				t.Errorf("retry event without lockkit.retry.backoff: %v", e.Fields)
			}
		}
		rel := childNamed(tr, hold, "lockkit.release table")
		if rel.Tags["lockkit.outcome"] != "released" || hold.Tags["lockkit.outcome"] != "released" {
			t.Errorf("release outcome %v, hold outcome %v, want released", rel.Tags["lockkit.outcome"], hold.Tags["lockkit.outcome"])
		}

		// The four requests raced: those that lost the first attempt waited,
		// and their acquire spans carry retry events (3 of 4 in every run
		// seen; only "at least one" is certain).
		traces := allTraces(t, j, service)
		for _, tr := range traces {
			logTrace(t, tr)
		}
		var retried int
		for _, tr := range reservations {
			h, _ := holdWith(tr, "lockkit.acquire table", "lockkit.release table")
			if len(childNamed(tr, h, "lockkit.acquire table").Events) > 0 {
				retried++
			}
		}
		t.Logf("%d of the 4 table-12 acquisitions waited", retried)
		if retried == 0 {
			t.Error("no table-12 acquire span has retry events: none of the four simultaneous requests waited")
		}
		// The stolen-lock story: replica-A's lease, lost at its deadline.
		if !anySpan(traces, func(s jaegertest.Span) bool {
			return s.OperationName == "lockkit.hold table" && s.Tags["lockkit.lost.cause"] == "deadline" &&
				hasEvent(s, "lockkit.lease.lost") && s.Tags["lockkit.outcome"] == "lost"
		}) {
			t.Error("no hold span with a lockkit.lease.lost event (cause deadline) from the stolen-lock story")
		}
	})

	t.Run("renewer", func(t *testing.T) {
		const service = "lockkit-renewer-e2e"
		env := append(exportEnv(j, r, service), "LOCKKIT_TTL_TABLE=900ms") // renew every 300ms
		runProgram(t, bins["./internal/e2e/cmd/renewer"], env, "-hold", "1s", "-table", "e2e-renew")
		tr := waitTrace(t, j, service, func(tr jaegertest.Trace) bool {
			_, ok := holdWith(tr, "lockkit.acquire table", "lockkit.release table", "lockkit.renew table")
			return ok
		})
		logTrace(t, tr)
		hold, _ := holdWith(tr, "lockkit.acquire table", "lockkit.release table", "lockkit.renew table")
		checkHold(t, tr, hold)
		if hold.Tags["lockkit.key"] != "lock:{table:e2e-renew}" {
			t.Errorf("key = %v", hold.Tags["lockkit.key"])
		}
		var renews int
		for _, c := range tr.Children(hold.SpanID) {
			if c.OperationName != "lockkit.renew table" {
				continue
			}
			renews++
			checkIdentity(t, c, "renew")
			if c.Tags["lockkit.outcome"] != "ok" {
				t.Errorf("renew outcome = %v, want ok", c.Tags["lockkit.outcome"])
			}
			if c.Tags["otel.status_code"] != nil {
				t.Errorf("renew status = %v, want unset", c.Tags["otel.status_code"])
			}
		}
		// 1s held, renewals every 300ms.
		if renews < 2 {
			t.Errorf("%d renew spans in a 1s hold with renewals every 300ms, want >= 2", renews)
		}
		if w := childNamed(tr, hold, "work"); w.SpanID == "" {
			t.Error("the program's \"work\" span is not a child of the hold span")
		}
	})

	// A leader change: B's term span links (FOLLOWS_FROM) to A's, in
	// another trace, with A's term number on the link.
	t.Run("leaders", func(t *testing.T) {
		const service = "lockkit-leaders-e2e"
		out := runProgram(t, bins["./internal/e2e/cmd/renewer"], exportEnv(j, r, service), "-hold", "10ms", "-table", "e2e-leaders", "-leaders")
		var terms []jaegertest.Span
		waitTraces(t, j, service, func(traces []jaegertest.Trace) bool {
			terms = terms[:0]
			for _, tr := range traces {
				for _, s := range tr.Spans {
					// A lost campaign round is a hold span too, ended
					// exhausted; a term ends released.
					if s.OperationName == "lockkit.hold cron_leader" && s.Tags["lockkit.outcome"] == "released" {
						terms = append(terms, s)
					}
				}
			}
			return len(terms) == 2
		})
		sort.Slice(terms, func(i, k int) bool { return terms[i].Start.Before(terms[k].Start) })
		a, b := terms[0], terms[1]
		t.Logf("%s\nA: trace %s span %s links %v\nB: trace %s span %s links %v", out, a.TraceID, a.SpanID, a.Links, b.TraceID, b.SpanID, b.Links)
		if a.TraceID == b.TraceID {
			t.Errorf("both terms are in trace %s, want a trace each", a.TraceID)
		}
		if len(a.Links) != 0 {
			t.Errorf("A's term, elected at once, has links %v", a.Links)
		}
		if len(b.Links) != 1 || b.Links[0].TraceID != a.TraceID || b.Links[0].SpanID != a.SpanID {
			t.Errorf("B's term links %v, want one link to A's term span %s/%s", b.Links, a.TraceID, a.SpanID)
		}
	})
}

// checkLoopbackOnly checks that every socket the Jaeger process listens on,
// the query API's included, is on 127.0.0.1.
func checkLoopbackOnly(t *testing.T, j *jaegertest.Jaeger) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return // ListeningSockets reads /proc
	}
	socks, err := j.ListeningSockets()
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) == 0 {
		t.Fatal("jaeger listens on nothing")
	}
	for _, s := range socks {
		if !s.Addr.Addr().IsLoopback() || s.Addr.Addr().String() != "127.0.0.1" {
			t.Errorf("jaeger listens on %v, not on 127.0.0.1", s)
		}
	}
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not in a module")
	}
	return filepath.Dir(gomod)
}

// buildPrograms builds each main package (a path relative to root) into a
// temporary directory, so that running one is bounded apart from compiling it.
func buildPrograms(t *testing.T, root string, pkgs ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, pkg := range pkgs {
		bin := filepath.Join(dir, filepath.Base(pkg))
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
		bins[pkg] = bin
	}
	return bins
}

// exportEnv is the environment of a program that exports its traces to j
// and uses r: the process's own environment without any OTEL_*, REDIS_URL or
// LOCKKIT_TTL_* it may carry, plus exactly what the test sets.
func exportEnv(j *jaegertest.Jaeger, r *testserver.Redis, service string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "OTEL_") || name == "REDIS_URL" || strings.HasPrefix(name, "LOCKKIT_TTL_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"REDIS_URL=redis://"+r.Addr(),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+j.OTLPHTTPEndpoint(),
		"OTEL_SERVICE_NAME="+service,
		// Jaeger takes traces only: its OTLP receiver has no metrics pipeline.
		"OTEL_METRICS_EXPORTER=none",
	)
}

// runProgram runs bin with env, bounded by runTimeout, and fails the test
// unless it exits 0. It returns stdout and stderr together.
func runProgram(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %v: exit %v after %v; output:\n%s", filepath.Base(bin), args, err, time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("%s: %v (ctx: %v)", filepath.Base(bin), err, ctx.Err())
	}
	return out.String()
}

// waitTrace polls Jaeger (bounded) until one of service's traces satisfies ok.
func waitTrace(t *testing.T, j *jaegertest.Jaeger, service string, ok func(jaegertest.Trace) bool) jaegertest.Trace {
	t.Helper()
	var found jaegertest.Trace
	waitTraces(t, j, service, func(traces []jaegertest.Trace) bool {
		for _, tr := range traces {
			if ok(tr) {
				found = tr
				return true
			}
		}
		return false
	})
	return found
}

// waitTraces polls Jaeger (bounded) until service's traces satisfy ok.
func waitTraces(t *testing.T, j *jaegertest.Jaeger, service string, ok func([]jaegertest.Trace) bool) {
	t.Helper()
	deadline := time.Now().Add(queryTimeout)
	var lastErr error
	var seen int
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		traces, err := j.FetchTraces(ctx, service)
		cancel()
		if err != nil {
			lastErr = err
		}
		seen = len(traces)
		if ok(traces) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the traces of service %q in Jaeger are not as expected after %v (%d traces stored; last error %v)", service, queryTimeout, seen, lastErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// isReservation reports whether tr is the example's reservation of table:
// a "reserve table" root span whose child is a hold with an acquire and a
// release.
func isReservation(tr jaegertest.Trace, table string) bool {
	for _, s := range tr.Spans {
		if s.OperationName != "reserve table" || s.ParentSpanID != "" || s.Tags["table"] != table {
			continue
		}
		for _, c := range tr.Children(s.SpanID) {
			if c.OperationName != "lockkit.hold table" {
				continue
			}
			if childNamed(tr, c, "lockkit.acquire table").SpanID != "" && childNamed(tr, c, "lockkit.release table").SpanID != "" {
				return true
			}
		}
	}
	return false
}

func allTraces(t *testing.T, j *jaegertest.Jaeger, service string) []jaegertest.Trace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	traces, err := j.FetchTraces(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	return traces
}

// holdWith returns a lockkit.hold table span of tr that has a child of each
// of the names.
func holdWith(tr jaegertest.Trace, names ...string) (jaegertest.Span, bool) {
	for _, s := range tr.Spans {
		if s.OperationName != "lockkit.hold table" {
			continue
		}
		var kids []string
		for _, c := range tr.Children(s.SpanID) {
			kids = append(kids, c.OperationName)
		}
		all := true
		for _, n := range names {
			all = all && slices.Contains(kids, n)
		}
		if all {
			return s, true
		}
	}
	return jaegertest.Span{}, false
}

// checkHold checks the hold span and its acquire and release children: the
// domain, the key, the fence, the outcome, the scope.
func checkHold(t *testing.T, tr jaegertest.Trace, hold jaegertest.Span) {
	t.Helper()
	checkIdentity(t, hold, "hold")
	fence, ok := hold.Tags["lockkit.fence"].(int64)
	if !ok || fence <= 0 {
		t.Errorf("hold: lockkit.fence = %#v, want > 0", hold.Tags["lockkit.fence"])
	}
	if hold.Tags["lockkit.outcome"] == nil {
		t.Error("hold: no lockkit.outcome")
	}
	acq := childNamed(tr, hold, "lockkit.acquire table")
	checkIdentity(t, acq, "acquire")
	if acq.Tags["lockkit.fence"] != hold.Tags["lockkit.fence"] {
		t.Errorf("acquire fence %v, hold fence %v", acq.Tags["lockkit.fence"], hold.Tags["lockkit.fence"])
	}
	if acq.Tags["lockkit.outcome"] != "acquired" {
		t.Errorf("acquire: lockkit.outcome = %v", acq.Tags["lockkit.outcome"])
	}
	if _, ok := acq.Tags["lockkit.acquire.wait"].(float64); !ok {
		t.Errorf("acquire: lockkit.acquire.wait = %#v, want a double", acq.Tags["lockkit.acquire.wait"])
	}
	rel := childNamed(tr, hold, "lockkit.release table")
	checkIdentity(t, rel, "release")
	if rel.Tags["lockkit.outcome"] == nil {
		t.Error("release: no lockkit.outcome")
	}
	for _, s := range []jaegertest.Span{acq, rel} {
		if s.Tags["lockkit.key"] != hold.Tags["lockkit.key"] {
			t.Errorf("%s: key %v, hold's %v", s.OperationName, s.Tags["lockkit.key"], hold.Tags["lockkit.key"])
		}
		if s.Start.Before(hold.Start) || s.Start.Add(s.Duration).After(hold.Start.Add(hold.Duration).Add(time.Millisecond)) {
			t.Errorf("%s (%v + %v) is outside the hold (%v + %v)", s.OperationName, s.Start, s.Duration, hold.Start, hold.Duration)
		}
	}
}

// checkIdentity checks what every lockkit span carries.
func checkIdentity(t *testing.T, s jaegertest.Span, what string) {
	t.Helper()
	if s.Tags["lockkit.domain"] != "table" {
		t.Errorf("%s: lockkit.domain = %v, want table", what, s.Tags["lockkit.domain"])
	}
	if k, _ := s.Tags["lockkit.key"].(string); !strings.HasPrefix(k, "lock:{table:") {
		t.Errorf("%s: lockkit.key = %#v, want lock:{table:…}", what, s.Tags["lockkit.key"])
	}
	if s.Tags["otel.scope.name"] != "github.com/lockkit/lockkit" || s.Tags["span.kind"] != "internal" {
		t.Errorf("%s: scope %v, kind %v", what, s.Tags["otel.scope.name"], s.Tags["span.kind"])
	}
}

func childNamed(tr jaegertest.Trace, parent jaegertest.Span, name string) jaegertest.Span {
	for _, c := range tr.Children(parent.SpanID) {
		if c.OperationName == name {
			return c
		}
	}
	return jaegertest.Span{}
}

func spanByID(tr jaegertest.Trace, id string) (jaegertest.Span, bool) {
	for _, s := range tr.Spans {
		if s.SpanID == id {
			return s, true
		}
	}
	return jaegertest.Span{}, false
}

func hasEvent(s jaegertest.Span, name string) bool {
	for _, e := range s.Events {
		if e.Name() == name {
			return true
		}
	}
	return false
}

func anySpan(traces []jaegertest.Trace, f func(jaegertest.Span) bool) bool {
	for _, tr := range traces {
		if slices.ContainsFunc(tr.Spans, f) {
			return true
		}
	}
	return false
}

// logTrace logs tr as an indented tree with each span's tags and events,
// as a record of what Jaeger stored.
func logTrace(t *testing.T, tr jaegertest.Trace) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s:\n", tr.TraceID)
	ids := map[string]bool{}
	for _, s := range tr.Spans {
		ids[s.SpanID] = true
	}
	var walk func(s jaegertest.Span, depth int)
	walk = func(s jaegertest.Span, depth int) {
		ind := strings.Repeat("  ", depth)
		fmt.Fprintf(&b, "%s%s  (%v)\n", ind, s.OperationName, s.Duration)
		keys := make([]string, 0, len(s.Tags))
		for k := range s.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s    %s = %#v\n", ind, k, s.Tags[k])
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s    event %v\n", ind, e.Fields)
		}
		kids := tr.Children(s.SpanID)
		sort.Slice(kids, func(i, j int) bool { return kids[i].Start.Before(kids[j].Start) })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	for _, s := range tr.Spans {
		if s.ParentSpanID == "" || !ids[s.ParentSpanID] {
			walk(s, 0)
		}
	}
	t.Log(b.String())
}
