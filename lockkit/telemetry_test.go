package lockkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/telnames"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/telemetry"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry of the runtime, end to end against a real redis-server: each test
// runs lock operations on a client whose tracer provider exports to memory
// (synchronously, so a span is there the moment it ends) and whose meter
// provider has a manual reader, and checks the exact spans, parents,
// attributes, events, statuses and metric points the operations leave.

// telRig is a lockkit client with in-memory spans and metrics.
type telRig struct {
	c      *Client
	tp     *sdktrace.TracerProvider
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
}

func newTelRig(t *testing.T, r *testserver.Redis, opts ...Option) *telRig {
	t.Helper()
	return newTelRigOver(t, r.Client(t), opts...)
}

// newTelRigOver is newTelRig over a given go-redis client.
func newTelRigOver(t *testing.T, rdb redis.UniversalClient, opts ...Option) *telRig {
	t.Helper()
	return newTelRigOn(t, goredis.New(rdb), opts...)
}

// newTelRigOn is newTelRig over any backend.
func newTelRigOn(t *testing.T, be driver.Spec, opts ...Option) *telRig {
	t.Helper()
	g := &telRig{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	g.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(g.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(g.reader))
	t.Cleanup(func() {
		_ = g.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	// The client's cleanup is registered after the providers', so the
	// client closes first.
	// Raw keys unless the test says otherwise: these tests check what each
	// span and log line records, and most check the default mode's.
	base := append(rawKeyOptions(t), WithTracerProvider(g.tp), WithMeterProvider(mp))
	g.c = newClientOn(t, be, append(base, opts...)...)
	return g
}

// named returns the ended spans called name, in the order they ended.
func (g *telRig) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range g.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the single ended span called name.
func (g *telRig) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	found := g.named(name)
	if len(found) != 1 {
		t.Fatalf("want 1 span %q, got %d; all spans: %v", name, len(found), telSpanNames(g.spans.GetSpans()))
	}
	return found[0]
}

// waitSpan waits (at most d) until a span called name has ended.
func (g *telRig) waitSpan(name string, d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if len(g.named(name)) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no span %q within %v", name, d)
		}
	}
}

func telSpanNames(ss tracetest.SpanStubs) []string {
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		names = append(names, s.Name)
	}
	return names
}

// wantNames checks the multiset of ended span names.
func (g *telRig) wantNames(t *testing.T, want ...string) {
	t.Helper()
	got := telSpanNames(g.spans.GetSpans())
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("spans = %v, want %v", got, want)
	}
}

func isChild(child, parent tracetest.SpanStub) bool {
	return child.Parent.IsValid() &&
		child.Parent.TraceID() == parent.SpanContext.TraceID() &&
		child.Parent.SpanID() == parent.SpanContext.SpanID()
}

func wantChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if !isChild(child, parent) {
		t.Errorf("span %q: parent %v, want %q (%v)", child.Name, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
	}
}

// wantSpanAttrs checks that kvs hold exactly the keys of exact (with their
// values) plus the keys in present (any value).
func wantSpanAttrs(t *testing.T, what string, kvs []attribute.KeyValue, exact []attribute.KeyValue, present ...attribute.Key) {
	t.Helper()
	got := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		got[kv.Key] = kv.Value
	}
	allowed := map[attribute.Key]bool{}
	for _, w := range exact {
		allowed[w.Key] = true
		v, ok := got[w.Key]
		switch {
		case !ok:
			t.Errorf("%s: attribute %s missing", what, w.Key)
		case v != w.Value:
			t.Errorf("%s: %s = %s, want %s", what, w.Key, v.Emit(), w.Value.Emit())
		}
	}
	for _, k := range present {
		allowed[k] = true
		if _, ok := got[k]; !ok {
			t.Errorf("%s: attribute %s missing", what, k)
		}
	}
	for k, v := range got {
		if !allowed[k] {
			t.Errorf("%s: unexpected attribute %s = %s", what, k, v.Emit())
		}
	}
}

func attrOf(kvs []attribute.KeyValue, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantStatus(t *testing.T, s tracetest.SpanStub, code codes.Code, desc string) {
	t.Helper()
	if s.Status.Code != code || s.Status.Description != desc {
		t.Errorf("span %q: status %v %q, want %v %q", s.Name, s.Status.Code, s.Status.Description, code, desc)
	}
}

func eventNames(s tracetest.SpanStub) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Name)
	}
	return out
}

// wantIdentity checks what every lockkit span carries: scope, kind, domain.
func wantIdentity(t *testing.T, s tracetest.SpanStub) {
	t.Helper()
	if s.InstrumentationScope.Name != telemetry.ScopeName || s.InstrumentationScope.Version != telemetry.Version {
		t.Errorf("span %q: scope %q %q, want %q %q", s.Name, s.InstrumentationScope.Name, s.InstrumentationScope.Version, telemetry.ScopeName, telemetry.Version)
	}
	if s.SpanKind != trace.SpanKindInternal {
		t.Errorf("span %q: kind %v, want internal", s.Name, s.SpanKind)
	}
}

// telPoint is one metric data point: a histogram's count and sum, or a
// counter's or gauge's value (in sum).
type telPoint struct {
	count uint64
	sum   float64
}

// metrics collects lockkit's metrics and returns their points by metric name,
// then by attribute set ("lockkit.domain=test,lockkit.outcome=acquired").
func (g *telRig) metrics(t *testing.T) map[string]map[string]telPoint {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := g.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	units := map[string]string{}
	for _, e := range telemetry.Catalog() {
		if e.Kind == telemetry.KindMetric {
			units[e.Name] = e.Unit
		}
	}
	out := map[string]map[string]telPoint{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			t.Errorf("metric scope %q, want %q", sm.Scope.Name, telemetry.ScopeName)
		}
		for _, m := range sm.Metrics {
			if want, ok := units[m.Name]; !ok || m.Unit != want {
				t.Errorf("metric %s: unit %q, want %q (in catalog: %v)", m.Name, m.Unit, want, ok)
			}
			pts := map[string]telPoint{}
			add := func(set attribute.Set, p telPoint) {
				if _, ok := set.Value(telnames.AttrKey); ok {
					t.Errorf("metric %s carries the lock key: %v", m.Name, set.Encoded(attribute.DefaultEncoder()))
				}
				pts[set.Encoded(attribute.DefaultEncoder())] = p
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, telPoint{count: p.Count, sum: p.Sum})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, telPoint{count: p.Count, sum: float64(p.Sum)})
				}
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("metric %s: counter not monotonic", m.Name)
				}
				for _, p := range d.DataPoints {
					add(p.Attributes, telPoint{sum: float64(p.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes, telPoint{sum: float64(p.Value)})
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
			out[m.Name] = pts
		}
	}
	return out
}

// breakerStates are the points of lockkit.breaker.status for node's breaker
// in state in: one per state, 1 for the breaker's (OTel's state convention).
func breakerStates(node, in string) map[string]telPoint {
	m := map[string]telPoint{}
	for _, s := range []string{"closed", "half_open", "open"} {
		var v float64
		if s == in {
			v = 1
		}
		m["lockkit.breaker.node="+node+",lockkit.breaker.state="+s] = telPoint{sum: v}
	}
	return m
}

// byOutcome and byCause are the attribute-set keys of metrics() for domain "test".
func byOutcome(o string) string { return "lockkit.domain=test,lockkit.outcome=" + o }
func byCause(c string) string   { return "lockkit.domain=test,lockkit.lost.cause=" + c }

// wantPoints checks a metric's points exactly: count for histograms (sum is
// not compared), value for counters and gauges.
func wantPoints(t *testing.T, ms map[string]map[string]telPoint, metric string, want map[string]telPoint) {
	t.Helper()
	got := ms[metric]
	for k, w := range want {
		p, ok := got[k]
		switch {
		case !ok:
			t.Errorf("metric %s: no point {%s}; points %v", metric, k, got)
		case w.count != 0 && p.count != w.count:
			t.Errorf("metric %s {%s}: count %d, want %d", metric, k, p.count, w.count)
		case w.count == 0 && p.sum != w.sum:
			t.Errorf("metric %s {%s}: value %v, want %v", metric, k, p.sum, w.sum)
		}
	}
	for k, p := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("metric %s: unexpected point {%s} %+v", metric, k, p)
		}
	}
}

func wantNoMetric(t *testing.T, ms map[string]map[string]telPoint, names ...string) {
	t.Helper()
	for _, n := range names {
		if pts, ok := ms[n]; ok && len(pts) > 0 {
			t.Errorf("metric %s recorded %v, want nothing", n, pts)
		}
	}
}

// Success: Do with a fencing policy, a caller span around it and an app span
// inside fn, held past a renew interval.
//
//	request
//	└─ lockkit.hold test                 domain key fence outcome=released
//	   ├─ lockkit.acquire test           domain key fence outcome=acquired attempts=1 acquire.wait
//	   ├─ book                           (the app's span, from fn's ctx)
//	   ├─ lockkit.renew test (≥ 1)       domain key outcome=ok
//	   └─ lockkit.release test           domain key outcome=released
func TestTelemetryDoSuccess(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r)
	const renewEvery = 150 * time.Millisecond
	d := testDomain(t, g.c, Policy{TTL: 3 * time.Second, Renew: renewEvery, Fencing: true})
	l := lockOn(d, "ok")
	app := g.tp.Tracer("app")

	ctx, req := app.Start(t.Context(), "request")
	var fence int64
	start := time.Now()
	err := l.Do(ctx, func(ctx context.Context, lease *Lease) error {
		fence = lease.Fence()
		_, book := app.Start(ctx, "book")
		defer book.End()
		// Hold past a renew interval; return right after the first renewal,
		// a whole interval before the next, so none is cut short by the release.
		return g.waitSpan("lockkit.renew test", 10*time.Second)
	})
	held := time.Since(start)
	req.End()
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	if fence <= 0 {
		t.Fatalf("fence = %d, want > 0 (fencing domain)", fence)
	}

	reqSpan := g.one(t, "request")
	hold := g.one(t, "lockkit.hold test")
	acq := g.one(t, "lockkit.acquire test")
	book := g.one(t, "book")
	rel := g.one(t, "lockkit.release test")
	renews := g.named("lockkit.renew test")
	if len(renews) < 1 {
		t.Fatalf("no renew span after holding %v with renewals every %v", held, renewEvery)
	}
	want := []string{"request", "book", "lockkit.hold test", "lockkit.acquire test", "lockkit.release test"}
	for range renews {
		want = append(want, "lockkit.renew test")
	}
	g.wantNames(t, want...)

	wantChild(t, hold, reqSpan)
	wantChild(t, acq, hold)
	wantChild(t, book, hold)
	wantChild(t, rel, hold)
	for _, rn := range renews {
		wantChild(t, rn, hold)
	}

	domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
	fenceKV := telnames.AttrFence.Int64(fence)
	wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, fenceKV, telnames.AttrOutcome.String("released")})
	wantSpanAttrs(t, "acquire", acq.Attributes, []attribute.KeyValue{domain, key, fenceKV,
		telnames.AttrOutcome.String("acquired"), telnames.AttrAttempts.Int(1)}, telnames.AttrAcquireWait)
	wantSpanAttrs(t, "release", rel.Attributes, []attribute.KeyValue{domain, key, telnames.AttrOutcome.String("released")})
	for i, rn := range renews {
		wantSpanAttrs(t, fmt.Sprintf("renew %d", i), rn.Attributes, []attribute.KeyValue{domain, key, telnames.AttrOutcome.String("ok")})
	}
	if w, _ := attrOf(acq.Attributes, telnames.AttrAcquireWait); w.AsFloat64() <= 0 || w.AsFloat64() > 5 {
		t.Errorf("acquire wait = %v s", w.AsFloat64())
	}
	for _, s := range append([]tracetest.SpanStub{hold, acq, rel}, renews...) {
		wantIdentity(t, s)
		wantStatus(t, s, codes.Unset, "")
		if len(s.Events) != 0 {
			t.Errorf("span %q: events %v, want none", s.Name, eventNames(s))
		}
	}
	// The hold covers its children.
	if acq.StartTime.Before(hold.StartTime) || rel.EndTime.After(hold.EndTime) || book.StartTime.Before(acq.EndTime) {
		t.Errorf("timeline: hold %v–%v, acquire %v–%v, book from %v, release to %v",
			hold.StartTime, hold.EndTime, acq.StartTime, acq.EndTime, book.StartTime, rel.EndTime)
	}

	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricAcquireDuration, map[string]telPoint{byOutcome("acquired"): {count: 1}})
	wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome("acquired"): {count: 1}})
	if p := ms[telnames.MetricAcquireAttempts][byOutcome("acquired")]; p.sum != 1 {
		t.Errorf("acquire attempts sum = %v, want 1", p.sum)
	}
	wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("released"): {count: 1}})
	if p := ms[telnames.MetricHoldDuration][byOutcome("released")]; p.sum < renewEvery.Seconds() {
		t.Errorf("hold duration = %vs, want >= the renew interval %v", p.sum, renewEvery)
	}
	wantPoints(t, ms, telnames.MetricReleases, map[string]telPoint{byOutcome("released"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricRenewals, map[string]telPoint{byOutcome("ok"): {sum: float64(len(renews))}})
	wantPoints(t, ms, telnames.MetricBreakerState, breakerStates(r.Addr(), "closed"))
	wantNoMetric(t, ms, telnames.MetricAcquireContended, telnames.MetricLeasesLost)
}

// Contention: TryDo on a held lock is an outcome, not an error.
func TestTelemetryTryDoContended(t *testing.T) {
	r := testserver.StartRedis(t)
	p := Policy{TTL: 5 * time.Second}
	holder, err := lockOn(testDomain(t, newClient(t, r), p), "busy").Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())

	g := newTelRig(t, r)
	l := lockOn(testDomain(t, g.c, p), "busy")
	ran := false
	if err := l.TryDo(t.Context(), func(context.Context, *Lease) error { ran = true; return nil }); !errors.Is(err, ErrNotAcquired) || ran {
		t.Fatalf("TryDo = %v (fn ran: %v), want ErrNotAcquired", err, ran)
	}

	g.wantNames(t, "lockkit.hold test", "lockkit.acquire test")
	hold, acq := g.one(t, "lockkit.hold test"), g.one(t, "lockkit.acquire test")
	if hold.Parent.IsValid() {
		t.Errorf("hold span has parent %v, want a root span (no span in ctx)", hold.Parent.SpanID())
	}
	wantChild(t, acq, hold)
	domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
	contended := telnames.AttrOutcome.String("contended")
	wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, contended})
	wantSpanAttrs(t, "acquire", acq.Attributes, []attribute.KeyValue{domain, key, contended, telnames.AttrAttempts.Int(1)}, telnames.AttrAcquireWait)
	for _, s := range []tracetest.SpanStub{hold, acq} {
		wantIdentity(t, s)
		wantStatus(t, s, codes.Unset, "") // not an error
		if len(s.Events) != 0 {
			t.Errorf("span %q: events %v, want none", s.Name, eventNames(s))
		}
	}

	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricAcquireContended, map[string]telPoint{byOutcome("contended"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricAcquireDuration, map[string]telPoint{byOutcome("contended"): {count: 1}})
	wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome("contended"): {count: 1}})
	wantNoMetric(t, ms, telnames.MetricHoldDuration, telnames.MetricReleases, telnames.MetricRenewals, telnames.MetricLeasesLost)
}

// Acquisitions that give up on a held lock: by the domain's max wait, by the
// caller's ctx deadline (both "timeout"), and by max attempts ("exhausted").
// The acquire span has a lockkit.retry event before each backoff and the
// give-up event last; it and the hold span are errors.
func TestTelemetryAcquireGiveUp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retry      Retry
		ctxLimit   time.Duration
		outcome    string
		event      string
		minWait    time.Duration
		attempts   int // exact, or 0: any (at least 2)
		matchErr   error
		maxBackoff time.Duration
	}{
		{
			name:     "max wait",
			retry:    Retry{Attempts: 1000, Initial: 20 * time.Millisecond, Max: 40 * time.Millisecond, MaxWait: 250 * time.Millisecond},
			outcome:  "timeout",
			event:    telnames.EventAcquireTimeout,
			minWait:  250 * time.Millisecond,
			matchErr: ErrNotAcquired,
			// Max with +50% jitter.
			maxBackoff: 60 * time.Millisecond,
		},
		{
			name:       "ctx deadline",
			retry:      Retry{Attempts: 1000, Initial: 20 * time.Millisecond, Max: 40 * time.Millisecond},
			ctxLimit:   250 * time.Millisecond,
			outcome:    "timeout",
			event:      telnames.EventAcquireTimeout,
			minWait:    200 * time.Millisecond, // the ctx's deadline was set before Do
			matchErr:   context.DeadlineExceeded,
			maxBackoff: 60 * time.Millisecond,
		},
		{
			name:       "max attempts",
			retry:      Retry{Attempts: 3, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond},
			outcome:    "exhausted",
			event:      telnames.EventAcquireExhausted,
			attempts:   3,
			matchErr:   ErrNotAcquired,
			maxBackoff: 30 * time.Millisecond,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testserver.StartRedis(t)
			p := Policy{TTL: 10 * time.Second, Retry: tc.retry}
			holder, err := lockOn(testDomain(t, newClient(t, r), p), "busy").Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Release(context.Background())

			g := newTelRig(t, r)
			l := lockOn(testDomain(t, g.c, p), "busy")
			ctx := t.Context()
			if tc.ctxLimit > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxLimit)
				defer cancel()
			}
			err = l.Do(ctx, func(context.Context, *Lease) error { return errors.New("fn ran") })
			if !errors.Is(err, tc.matchErr) {
				t.Fatalf("Do = %v, want %v", err, tc.matchErr)
			}

			g.wantNames(t, "lockkit.hold test", "lockkit.acquire test")
			hold, acq := g.one(t, "lockkit.hold test"), g.one(t, "lockkit.acquire test")
			wantChild(t, acq, hold)

			// Events: lockkit.retry before each backoff, then the give-up event.
			names := eventNames(acq)
			if len(names) < 2 || names[len(names)-1] != tc.event {
				t.Fatalf("acquire events = %v, want lockkit.retry… then %s", names, tc.event)
			}
			giveUp := acq.Events[len(names)-1]
			nv, _ := attrOf(giveUp.Attributes, telnames.AttrAttempts)
			n := int(nv.AsInt64())
			if tc.attempts != 0 && n != tc.attempts {
				t.Errorf("%d attempts (events %v), want %d", n, names, tc.attempts)
			}
			if n < 2 {
				t.Errorf("only %d attempts (events %v)", n, names)
			}
			// A retry event announces the next attempt. The policy gives up
			// after an attempt (retries = attempts-1); a ctx may end during
			// the backoff that followed the last one (retries = attempts).
			retries := len(names) - 1
			if retries != n-1 && !(tc.ctxLimit > 0 && retries == n) {
				t.Errorf("%d retry events for %d attempts: %v", retries, n, names)
			}
			for i, e := range acq.Events[:retries] {
				what := fmt.Sprintf("event %d", i)
				if e.Name != telnames.EventRetry {
					t.Errorf("%s: %s, want %s", what, e.Name, telnames.EventRetry)
					continue
				}
				if tc.ctxLimit > 0 && retries == n && i == retries-1 {
					// The last attempt, which the ctx's deadline may have
					// cut mid-command (its outcome is then not contention):
					// only its number is certain.
					wantSpanAttrs(t, what, e.Attributes, []attribute.KeyValue{telnames.AttrRetryAttempt.Int(i + 1)}, telnames.AttrOutcome, telnames.AttrRetryBackoff)
					continue
				}
				wantSpanAttrs(t, what, e.Attributes, []attribute.KeyValue{
					telnames.AttrRetryAttempt.Int(i + 1), telnames.AttrOutcome.String("contended"),
				}, telnames.AttrRetryBackoff)
				if b, _ := attrOf(e.Attributes, telnames.AttrRetryBackoff); b.AsFloat64() <= 0 || b.AsFloat64() > tc.maxBackoff.Seconds() {
					t.Errorf("%s: backoff %vs, want in (0, %v]", what, b.AsFloat64(), tc.maxBackoff)
				}
			}
			wantSpanAttrs(t, "give-up event", giveUp.Attributes, []attribute.KeyValue{telnames.AttrAttempts.Int(n)}, telnames.AttrAcquireWait)
			wait, _ := attrOf(giveUp.Attributes, telnames.AttrAcquireWait)
			if wait.AsFloat64() < tc.minWait.Seconds() {
				t.Errorf("give-up event wait %vs, want >= %v", wait.AsFloat64(), tc.minWait)
			}

			domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
			outcome, errType := telnames.AttrOutcome.String(tc.outcome), telnames.AttrErrorType.String(tc.outcome)
			wantSpanAttrs(t, "acquire", acq.Attributes, []attribute.KeyValue{domain, key, outcome, errType,
				telnames.AttrAttempts.Int(n), telnames.AttrAcquireWait.Float64(wait.AsFloat64())})
			wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, outcome, errType})
			for _, s := range []tracetest.SpanStub{hold, acq} {
				wantIdentity(t, s)
				// KeyRaw: the description is the error returned to the caller.
				wantStatus(t, s, codes.Error, err.Error())
			}
			if len(hold.Events) != 0 {
				t.Errorf("hold events %v, want none", eventNames(hold))
			}

			ms := g.metrics(t)
			wantPoints(t, ms, telnames.MetricAcquireDuration, map[string]telPoint{byOutcome(tc.outcome): {count: 1}})
			wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome(tc.outcome): {count: 1}})
			if p := ms[telnames.MetricAcquireAttempts][byOutcome(tc.outcome)]; p.sum != float64(n) {
				t.Errorf("attempts histogram sum %v, want %d", p.sum, n)
			}
			if p := ms[telnames.MetricAcquireDuration][byOutcome(tc.outcome)]; p.sum < tc.minWait.Seconds() {
				t.Errorf("acquire duration %vs, want >= %v", p.sum, tc.minWait)
			}
			wantPoints(t, ms, telnames.MetricAcquireContended, map[string]telPoint{byOutcome(tc.outcome): {sum: 1}})
			wantNoMetric(t, ms, telnames.MetricHoldDuration, telnames.MetricReleases, telnames.MetricRenewals, telnames.MetricLeasesLost)
		})
	}
}

// Lost at the deadline: the server is paused while fn runs (as in
// TestLostLeaseWhenRedisPaused); renewals fail, the local deadline passes.
func TestTelemetryLeaseLostDeadline(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 600 * time.Millisecond
	g := newTelRig(t, r, WithCommandTimeout(100*time.Millisecond))
	l := lockOn(testDomain(t, g.c, Policy{TTL: ttl}), "paused")
	errFn := errors.New("fn stopped")
	err := l.Do(t.Context(), func(ctx context.Context, _ *Lease) error {
		r.Pause(t)
		defer r.Resume(t)
		select {
		case <-ctx.Done():
			return errFn
		case <-time.After(20 * ttl):
			return errors.New("fn's ctx was never cancelled")
		}
	})
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, errFn) {
		t.Fatalf("Do = %v, want ErrLockLost joined with fn's error", err)
	}

	hold, acq, rel := g.one(t, "lockkit.hold test"), g.one(t, "lockkit.acquire test"), g.one(t, "lockkit.release test")
	wantChild(t, acq, hold)
	wantChild(t, rel, hold)
	domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
	deadline := telnames.AttrLostCause.String("deadline")
	wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, deadline,
		telnames.AttrOutcome.String("lost"), telnames.AttrErrorType.String("lost")})
	wantIdentity(t, hold)
	if hold.Status.Code != codes.Error || !strings.Contains(hold.Status.Description, "deadline passed") {
		t.Errorf("hold status %v %q, want Error with the lost cause", hold.Status.Code, hold.Status.Description)
	}
	if names := eventNames(hold); !slices.Equal(names, []string{telnames.EventLeaseLost}) {
		t.Fatalf("hold events = %v, want [%s]", names, telnames.EventLeaseLost)
	}
	wantSpanAttrs(t, "lease.lost event", hold.Events[0].Attributes, []attribute.KeyValue{deadline})

	// Every renewal during the pause failed; none was refused.
	renews := g.named("lockkit.renew test")
	if len(renews) == 0 {
		t.Fatal("no renew span while the server was paused")
	}
	// The last one may still be in flight when the lease's deadline passes:
	// the loss cancels it (canceled, not a failure).
	canceled := 0
	for i, rn := range renews {
		wantChild(t, rn, hold)
		if o, _ := attrOf(rn.Attributes, telnames.AttrOutcome); i == len(renews)-1 && o.AsString() == "canceled" {
			canceled++
			continue
		}
		wantSpanAttrs(t, fmt.Sprintf("renew %d", i), rn.Attributes, []attribute.KeyValue{domain, key,
			telnames.AttrOutcome.String("unavailable"), telnames.AttrErrorType.String("unavailable")})
		if rn.Status.Code != codes.Error {
			t.Errorf("renew %d: status %v, want Error", i, rn.Status.Code)
		}
	}
	// The release ran after Resume: the key is gone by then, or, when the
	// release beat the server's own expiry by the drift allowance, still ours.
	relOutcome, _ := attrOf(rel.Attributes, telnames.AttrOutcome)
	if o := relOutcome.AsString(); o != "expired" && o != "released" {
		t.Errorf("release outcome %q, want expired (or released)", o)
	}

	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricLeasesLost, map[string]telPoint{byCause("deadline"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("lost"): {count: 1}})
	wantRenewals := map[string]telPoint{byOutcome("unavailable"): {sum: float64(len(renews) - canceled)}}
	if canceled > 0 {
		wantRenewals[byOutcome("canceled")] = telPoint{sum: float64(canceled)}
	}
	wantPoints(t, ms, telnames.MetricRenewals, wantRenewals)
	wantPoints(t, ms, telnames.MetricReleases, map[string]telPoint{byOutcome(relOutcome.AsString()): {sum: 1}})
}

// Lost by a refused extend: the key is deleted behind the lease's back, then
// Extend.
func TestTelemetryLeaseLostRefused(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r)
	l := lockOn(testDomain(t, g.c, Policy{TTL: 5 * time.Second, Renew: -1}), "refused")
	lease, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Client(t).Del(t.Context(), l.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after the key was deleted = %v, want ErrNotHeld", err)
	}
	if !errors.Is(lease.Err(), ErrLockLost) {
		t.Fatalf("lease.Err() = %v, want ErrLockLost", lease.Err())
	}
	relErr := lease.Release(t.Context())
	if !errors.Is(relErr, ErrNotHeld) {
		t.Fatalf("Release = %v, want ErrNotHeld", relErr)
	}

	g.wantNames(t, "lockkit.hold test", "lockkit.acquire test", "lockkit.renew test", "lockkit.release test")
	hold := g.one(t, "lockkit.hold test")
	acq, rn, rel := g.one(t, "lockkit.acquire test"), g.one(t, "lockkit.renew test"), g.one(t, "lockkit.release test")
	for _, s := range []tracetest.SpanStub{acq, rn, rel} {
		wantChild(t, s, hold)
		wantIdentity(t, s)
	}
	domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
	refused := telnames.AttrLostCause.String("refused")
	wantSpanAttrs(t, "renew", rn.Attributes, []attribute.KeyValue{domain, key,
		telnames.AttrOutcome.String("refused"), telnames.AttrErrorType.String("refused")})
	wantStatus(t, rn, codes.Error, fmt.Sprintf("lockkit: extend %s: %v", l.Key(), ErrNotHeld))
	wantSpanAttrs(t, "release", rel.Attributes, []attribute.KeyValue{domain, key,
		telnames.AttrOutcome.String("expired"), telnames.AttrErrorType.String("expired")})
	wantStatus(t, rel, codes.Error, relErr.Error())
	wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, refused,
		telnames.AttrOutcome.String("lost"), telnames.AttrErrorType.String("lost")})
	wantStatus(t, hold, codes.Error, lease.Err().Error())
	if names := eventNames(hold); !slices.Equal(names, []string{telnames.EventLeaseLost}) {
		t.Fatalf("hold events = %v, want [%s]", names, telnames.EventLeaseLost)
	}
	wantSpanAttrs(t, "lease.lost event", hold.Events[0].Attributes, []attribute.KeyValue{refused})
	// The loss is recorded when the extend is refused, before the release.
	if at := hold.Events[0].Time; at.Before(rn.StartTime) || at.After(rel.StartTime) {
		t.Errorf("lease.lost at %v, want between the renew start %v and the release start %v", at, rn.StartTime, rel.StartTime)
	}

	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricRenewals, map[string]telPoint{byOutcome("refused"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricLeasesLost, map[string]telPoint{byCause("refused"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricReleases, map[string]telPoint{byOutcome("expired"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("lost"): {count: 1}})
}

// Releasing a lease whose key is no longer ours: the release is "expired".
func TestTelemetryReleaseExpired(t *testing.T) {
	t.Run("deadline passed", func(t *testing.T) {
		// No renewal and a short TTL: the lease is lost at its local deadline,
		// Redis expires the key, and the late release finds nothing.
		r := testserver.StartRedis(t)
		g := newTelRig(t, r)
		l := lockOn(testDomain(t, g.c, Policy{TTL: time.Second, Renew: -1}), "late")
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-lease.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the lease was not lost at its deadline")
		}
		waitGone(t, r, l.Key())
		relErr := lease.Release(t.Context())
		if !errors.Is(relErr, ErrNotHeld) {
			t.Fatalf("Release = %v, want ErrNotHeld", relErr)
		}

		g.wantNames(t, "lockkit.hold test", "lockkit.acquire test", "lockkit.release test")
		hold, rel := g.one(t, "lockkit.hold test"), g.one(t, "lockkit.release test")
		wantChild(t, rel, hold)
		domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
		wantSpanAttrs(t, "release", rel.Attributes, []attribute.KeyValue{domain, key,
			telnames.AttrOutcome.String("expired"), telnames.AttrErrorType.String("expired")})
		wantStatus(t, rel, codes.Error, relErr.Error())
		// The hold ended lost: the deadline passed before the release.
		wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, telnames.AttrLostCause.String("deadline"),
			telnames.AttrOutcome.String("lost"), telnames.AttrErrorType.String("lost")})
		if names := eventNames(hold); !slices.Equal(names, []string{telnames.EventLeaseLost}) {
			t.Errorf("hold events = %v, want [%s]", names, telnames.EventLeaseLost)
		}

		ms := g.metrics(t)
		wantPoints(t, ms, telnames.MetricReleases, map[string]telPoint{byOutcome("expired"): {sum: 1}})
		wantPoints(t, ms, telnames.MetricLeasesLost, map[string]telPoint{byCause("deadline"): {sum: 1}})
		wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("lost"): {count: 1}})
		wantNoMetric(t, ms, telnames.MetricRenewals)
	})

	t.Run("key deleted", func(t *testing.T) {
		// The key vanished while the lease still believed itself held: the
		// release finds it so. The release span says "expired"; the hold
		// ends "lost" (cause refused: the store no longer holds the lease),
		// since exclusion was gone before the release.
		r := testserver.StartRedis(t)
		g := newTelRig(t, r)
		l := lockOn(testDomain(t, g.c, Policy{TTL: 5 * time.Second, Renew: -1}), "gone")
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Client(t).Del(t.Context(), l.Key()).Err(); err != nil {
			t.Fatal(err)
		}
		relErr := lease.Release(t.Context())
		if !errors.Is(relErr, ErrNotHeld) {
			t.Fatalf("Release = %v, want ErrNotHeld", relErr)
		}
		if err := lease.Err(); !errors.Is(err, ErrLockLost) {
			t.Fatalf("lease.Err after the release found the key gone = %v, want ErrLockLost", err)
		}
		hold, rel := g.one(t, "lockkit.hold test"), g.one(t, "lockkit.release test")
		domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
		wantSpanAttrs(t, "release", rel.Attributes, []attribute.KeyValue{domain, key, telnames.AttrOutcome.String("expired"), telnames.AttrErrorType.String("expired")})
		wantSpanAttrs(t, "hold", hold.Attributes, []attribute.KeyValue{domain, key, telnames.AttrLostCause.String("refused"),
			telnames.AttrOutcome.String("lost"), telnames.AttrErrorType.String("lost")})
		wantStatus(t, rel, codes.Error, relErr.Error())
		wantStatus(t, hold, codes.Error, lease.Err().Error())
		if names := eventNames(hold); !slices.Equal(names, []string{telnames.EventLeaseLost}) {
			t.Errorf("hold events = %v, want [%s]", names, telnames.EventLeaseLost)
		}
		ms := g.metrics(t)
		wantPoints(t, ms, telnames.MetricReleases, map[string]telPoint{byOutcome("expired"): {sum: 1}})
		wantPoints(t, ms, telnames.MetricHoldDuration, map[string]telPoint{byOutcome("lost"): {count: 1}})
		wantPoints(t, ms, telnames.MetricLeasesLost, map[string]telPoint{byCause("refused"): {sum: 1}})
	})
}

// The acquisition that trips the breaker carries the state change, and the
// breaker state gauge follows it.
func TestTelemetryBreakerChange(t *testing.T) {
	r := testserver.StartRedis(t)
	g := newTelRig(t, r, WithCommandTimeout(200*time.Millisecond),
		WithBreaker(breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Hour}))
	wantPoints(t, g.metrics(t), telnames.MetricBreakerState, breakerStates(r.Addr(), "closed"))

	l := lockOn(testDomain(t, g.c, Policy{TTL: time.Second}), "down")
	r.Kill(t)
	for i := range 3 {
		if err := l.TryDo(t.Context(), func(context.Context, *Lease) error { return nil }); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryDo %d on a dead server = %v, want ErrUnavailable", i, err)
		}
	}

	acqs := g.named("lockkit.acquire test")
	if len(acqs) != 3 {
		t.Fatalf("%d acquire spans, want 3", len(acqs))
	}
	for i, want := range []string{"unavailable", "unavailable", "breaker_open"} {
		if o, _ := attrOf(acqs[i].Attributes, telnames.AttrOutcome); o.AsString() != want {
			t.Errorf("acquire %d: outcome %q, want %q", i, o.AsString(), want)
		}
		if acqs[i].Status.Code != codes.Error {
			t.Errorf("acquire %d: status %v, want Error", i, acqs[i].Status.Code)
		}
	}
	// Only the second acquisition, the one whose failure tripped it, has the event.
	for i, s := range acqs {
		names := eventNames(s)
		if i == 1 {
			if !slices.Equal(names, []string{telnames.EventBreakerChange}) {
				t.Fatalf("tripping acquire: events %v, want [%s]", names, telnames.EventBreakerChange)
			}
			wantSpanAttrs(t, "breaker.change event", s.Events[0].Attributes, []attribute.KeyValue{
				telnames.AttrBreakerNode.String(r.Addr()),
				telnames.AttrBreakerFrom.String("closed"),
				telnames.AttrBreakerTo.String("open"),
			})
		} else if len(names) != 0 {
			t.Errorf("acquire %d: events %v, want none", i, names)
		}
	}
	for _, s := range g.named("lockkit.hold test") {
		if len(s.Events) != 0 {
			t.Errorf("hold span: events %v, want none (the change belongs to the acquire)", eventNames(s))
		}
	}

	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricBreakerState, breakerStates(r.Addr(), "open"))
	wantPoints(t, ms, telnames.MetricAcquireDuration, map[string]telPoint{
		byOutcome("unavailable"): {count: 2}, byOutcome("breaker_open"): {count: 1},
	})
}

// telLogBuf is a bytes.Buffer safe for the client's concurrent log writes.
type telLogBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *telLogBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *telLogBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// line returns the first JSON log line whose msg is msg, if any.
func (b *telLogBuf) line(msg string) (map[string]any, bool) {
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			return m, true
		}
	}
	return nil, false
}

// The log line of a lost lease names the hold span, so a log search leads to
// the trace.
func TestTelemetryLostLeaseLogCarriesTrace(t *testing.T) {
	r := testserver.StartRedis(t)
	var buf telLogBuf
	g := newTelRig(t, r, WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	l := lockOn(testDomain(t, g.c, Policy{TTL: time.Second, Renew: -1}), "logged")
	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const msg = "lockkit: lease lost"
	var line map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var ok bool
		if line, ok = buf.line(msg); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q log line; log:\n%s", msg, buf.String())
		}
	}
	_ = lease.Release(t.Context())

	hold := g.one(t, "lockkit.hold test")
	if got, want := line[telemetry.LogTraceID], hold.SpanContext.TraceID().String(); got != want {
		t.Errorf("log line trace_id = %v, want the hold span's %s; line %v", got, want, line)
	}
	if got, want := line[telemetry.LogSpanID], hold.SpanContext.SpanID().String(); got != want {
		t.Errorf("log line span_id = %v, want the hold span's %s; line %v", got, want, line)
	}
	if line["level"] != "WARN" || line["domain"] != "test" || line["key"] != l.Key() {
		t.Errorf("log line %v, want level WARN, domain test, key %s", line, l.Key())
	}
}

// Key modes: hashed keys are HashKey(key, secret) on every span, omitted keys
// are on none; the domain stays. Failure descriptions, which may quote the
// key, become the outcome's name.
func TestTelemetryKeyModes(t *testing.T) {
	secret := []byte("telemetry-test-secret")
	for _, tc := range []struct {
		name   string
		mode   telemetry.KeyMode
		secret []byte
		want   func(key string) (string, bool)
	}{
		{"hashed", telemetry.KeyHashed, secret, func(k string) (string, bool) { return telemetry.HashKey(k, secret), true }},
		{"hashed without secret", telemetry.KeyHashed, nil, func(k string) (string, bool) { return telemetry.HashKey(k, nil), true }},
		{"omitted", telemetry.KeyOmitted, secret, func(string) (string, bool) { return "", false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testserver.StartRedis(t)
			g := newTelRig(t, r, WithKeyMode(tc.mode, tc.secret))
			l := lockOn(testDomain(t, g.c, Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 2, Initial: 5 * time.Millisecond}}), "pii")
			if err := l.Do(t.Context(), func(context.Context, *Lease) error { return nil }); err != nil {
				t.Fatal(err)
			}
			// A failure too: its status description must not quote the key.
			lease, err := l.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Do(t.Context(), func(context.Context, *Lease) error { return nil }); !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("Do on a held lock = %v", err)
			}
			if err := lease.Release(t.Context()); err != nil {
				t.Fatal(err)
			}

			want, has := tc.want(l.Key())
			if has && (want == l.Key() || len(want) != 32) {
				t.Fatalf("HashKey(%q) = %q", l.Key(), want)
			}
			spans := g.spans.GetSpans()
			if len(spans) != 8 { // 3 holds, 3 acquires, 2 releases
				t.Errorf("%d spans %v, want 8", len(spans), telSpanNames(spans))
			}
			for _, s := range spans {
				if v, _ := attrOf(s.Attributes, telnames.AttrDomain); v.AsString() != "test" {
					t.Errorf("span %q: domain %q", s.Name, v.AsString())
				}
				got, ok := attrOf(s.Attributes, telnames.AttrKey)
				switch {
				case ok != has:
					t.Errorf("span %q: has key attribute %v, want %v", s.Name, ok, has)
				case has && got.AsString() != want:
					t.Errorf("span %q: lockkit.key = %q, want %q", s.Name, got.AsString(), want)
				}
				if strings.Contains(s.Status.Description, l.Key()) {
					t.Errorf("span %q: status description %q quotes the key", s.Name, s.Status.Description)
				}
				if s.Status.Code == codes.Error && s.Status.Description != "exhausted" {
					t.Errorf("span %q: status description %q, want the outcome name", s.Name, s.Status.Description)
				}
			}
		})
	}
}

// Do that waits for a held lock and gets it: retry events on an acquire span
// that ends "acquired", no error, and the acquisition counts as contended.
func TestTelemetryDoWaitsThenAcquires(t *testing.T) {
	r := testserver.StartRedis(t)
	p := Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 1000, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond, MaxWait: 10 * time.Second}}
	holder, err := lockOn(testDomain(t, newClient(t, r), p), "queue").Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = holder.Release(context.Background()) })

	g := newTelRig(t, r)
	l := lockOn(testDomain(t, g.c, p), "queue")
	if err := l.Do(t.Context(), func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatalf("Do = %v", err)
	}
	hold, acq := g.one(t, "lockkit.hold test"), g.one(t, "lockkit.acquire test")
	wantChild(t, acq, hold)
	names := eventNames(acq)
	if len(names) == 0 {
		t.Fatal("no retry events while the lock was held for 100ms")
	}
	for i, e := range acq.Events {
		if e.Name != telnames.EventRetry {
			t.Errorf("event %d = %s, want %s", i, e.Name, telnames.EventRetry)
		}
		if a, _ := attrOf(e.Attributes, telnames.AttrRetryAttempt); a.AsInt64() != int64(i+1) {
			t.Errorf("event %d: attempt %d, want %d", i, a.AsInt64(), i+1)
		}
	}
	domain, key := telnames.AttrDomain.String("test"), telnames.AttrKey.String(l.Key())
	wantSpanAttrs(t, "acquire", acq.Attributes, []attribute.KeyValue{domain, key,
		telnames.AttrOutcome.String("acquired"), telnames.AttrAttempts.Int(len(names) + 1)}, telnames.AttrAcquireWait)
	if w, _ := attrOf(acq.Attributes, telnames.AttrAcquireWait); w.AsFloat64() < 0.05 {
		t.Errorf("acquire wait %vs, want about the 100ms the holder kept the lock", w.AsFloat64())
	}
	wantStatus(t, acq, codes.Unset, "")
	wantStatus(t, hold, codes.Unset, "")

	ms := g.metrics(t)
	wantPoints(t, ms, telnames.MetricAcquireContended, map[string]telPoint{byOutcome("acquired"): {sum: 1}})
	wantPoints(t, ms, telnames.MetricAcquireAttempts, map[string]telPoint{byOutcome("acquired"): {count: 1}})
	if p := ms[telnames.MetricAcquireAttempts][byOutcome("acquired")]; p.sum != float64(len(names)+1) {
		t.Errorf("attempts sum %v, want %d", p.sum, len(names)+1)
	}
}

// blockExtend is a go-redis hook that holds the extend script's command
// until its ctx ends, and says when one is waiting.
type blockExtend struct{ waiting chan struct{} }

func (h blockExtend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h blockExtend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.Contains(cmd.Args(), any(rediswire.ExtendScript.Hash())) {
			select {
			case h.waiting <- struct{}{}:
			default:
			}
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (h blockExtend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A renewal that Release cuts short (the lease's ctx is cancelled while the
// extend is in flight) is the caller's doing, not the backend's: outcome
// canceled, no error status, not counted as unavailable. The background
// renewal hits this whenever a Do ends while an extend is on the wire.
func TestTelemetryRenewCutShortByRelease(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	hook := blockExtend{waiting: make(chan struct{}, 1)}
	rdb.AddHook(hook)
	g := newTelRigOver(t, rdb)
	l := lockOn(testDomain(t, g.c, Policy{TTL: 5 * time.Second, Renew: 20 * time.Millisecond}), "cut")
	lease, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hook.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal started")
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.waitSpan("lockkit.renew test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rn := g.one(t, "lockkit.renew test")
	wantSpanAttrs(t, "renew", rn.Attributes, []attribute.KeyValue{telnames.AttrDomain.String("test"),
		telnames.AttrKey.String(l.Key()), telnames.AttrOutcome.String("canceled")})
	wantStatus(t, rn, codes.Unset, "")
	wantPoints(t, g.metrics(t), telnames.MetricRenewals, map[string]telPoint{byOutcome("canceled"): {sum: 1}})
}

// A Redlock acquire span carries one lockkit.redlock.node event per node:
// its address, its answer and how long it took.
func TestTelemetryRedlockNodeEvents(t *testing.T) {
	nodes := []*testserver.Redis{testserver.StartRedis(t), testserver.StartRedis(t), testserver.StartRedis(t)}
	rdbs := []redis.UniversalClient{nodes[0].Client(t), nodes[1].Client(t), nodes[2].Client(t)}
	for _, rdb := range rdbs[:2] { // new nodes, marked as an operator would (docs/deployments.md)
		if err := rediswire.MarkRedlockNode(t.Context(), rdb); err != nil {
			t.Fatal(err)
		}
	}
	nodes[2].Kill(t)
	g := newTelRigOn(t, goredis.Redlock(rdbs...))
	l := lockOn(testDomain(t, g.c, Policy{TTL: 2 * time.Second}), "x")
	if err := l.Do(t.Context(), func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatalf("Do with 2 of 3 nodes up: %v", err)
	}
	acq := g.one(t, "lockkit.acquire test")
	results := map[string]string{}
	for _, ev := range acq.Events {
		if ev.Name != telnames.EventRedlockNode {
			continue
		}
		var node, result string
		for _, kv := range ev.Attributes {
			switch kv.Key {
			case telnames.AttrBreakerNode:
				node = kv.Value.AsString()
			case telnames.AttrNodeResult:
				result = kv.Value.AsString()
			}
		}
		results[node] = result
	}
	want := map[string]string{nodes[0].Addr(): "ok", nodes[1].Addr(): "ok", nodes[2].Addr(): "failed"}
	if len(results) != 3 {
		t.Fatalf("node events %v, want one per node: %v", results, want)
	}
	for node, r := range want {
		if results[node] != r && !(r == "failed" && results[node] == "pending") {
			t.Errorf("node %s: %q, want %q (events %v)", node, results[node], r, results)
		}
	}
}

// A term of an election is its hold span, with lockkit.kind=election and its
// number as lockkit.fence; a semaphore's permit carries lockkit.kind=semaphore.
func TestTelemetryKinds(t *testing.T) {
	g := newTelRig(t, testserver.StartRedis(t))
	ctx := t.Context()
	el := g.c.Domain(DomainSpec{Name: "leader", Policy: Policy{TTL: 2 * time.Second, Kind: "election"}})
	var term int64
	if err := el.Key(1).Literal("x").Election().Lead(ctx, func(ctx context.Context, tm *Term) error {
		term = tm.Number()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sem := g.c.Domain(DomainSpec{Name: "permits", Policy: Policy{TTL: 2 * time.Second, Kind: "semaphore", Permits: 2}})
	if err := sem.Key(1).Literal("x").Semaphore().Do(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if v, ok := attrOf(g.one(t, "lockkit.hold leader").Attributes, telnames.AttrFence); !ok || v.AsInt64() != term || term == 0 {
		t.Errorf("the term's hold span has lockkit.fence %v (%v), want the term number %d", v.AsInt64(), ok, term)
	}
	for name, want := range map[string]string{
		"lockkit.hold leader": "election", "lockkit.acquire leader": "election",
		"lockkit.hold permits": "semaphore", "lockkit.acquire permits": "semaphore",
	} {
		if v, ok := attrOf(g.one(t, name).Attributes, telnames.AttrKind); !ok || v.AsString() != want {
			t.Errorf("%s: lockkit.kind %q (%v), want %q", name, v.AsString(), ok, want)
		}
	}
}

// TestTelemetryElectionLink: a leader change shows as a span link. B
// campaigns while A leads (its rounds lose, so it reads A's holder
// description); A resigns, B's term starts, and B's term span (its hold
// span) links to A's term span, by A's trace and span ids, with A's term
// number on the link. A, elected at once, has no link.
func TestTelemetryElectionLink(t *testing.T) {
	g := newTelRig(t, testserver.StartRedis(t))
	ctx := t.Context()
	d := g.c.Domain(DomainSpec{Name: "leader", Policy: Policy{TTL: 2 * time.Second, Kind: "election",
		Retry: Retry{Attempts: 2, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}}})
	el := d.Key(1).Literal("x").Election()
	leading, resign := make(chan int64), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		aErr <- el.Lead(ctx, func(ctx context.Context, tm *Term) error {
			leading <- tm.Number()
			<-resign
			return nil
		})
	}()
	termA := <-leading
	var termB int64
	bErr := make(chan error, 1)
	go func() {
		bErr <- el.Lead(ctx, func(ctx context.Context, tm *Term) error {
			termB = tm.Number()
			return nil
		})
	}()
	// B loses a few rounds (each ends with a read of the holder) first.
	if err := g.waitSpan("lockkit.acquire leader", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for len(g.named("lockkit.acquire leader")) < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	close(resign)
	if err := <-aErr; err != nil {
		t.Fatal(err)
	}
	if err := <-bErr; err != nil {
		t.Fatal(err)
	}
	var a, b tracetest.SpanStub
	for _, s := range g.named("lockkit.hold leader") {
		v, _ := attrOf(s.Attributes, telnames.AttrFence)
		switch v.AsInt64() {
		case termA:
			a = s
		case termB:
			b = s
		}
	}
	if !a.SpanContext.IsValid() || !b.SpanContext.IsValid() || termB <= termA {
		t.Fatalf("terms A %d, B %d: term spans not found; all spans: %v", termA, termB, telSpanNames(g.spans.GetSpans()))
	}
	if len(a.Links) != 0 {
		t.Errorf("A's term span, elected at once, has links %v", a.Links)
	}
	if len(b.Links) != 1 {
		t.Fatalf("B's term span has %d links, want 1 to A's term span %v", len(b.Links), a.SpanContext.SpanID())
	}
	l := b.Links[0]
	if l.SpanContext.TraceID() != a.SpanContext.TraceID() || l.SpanContext.SpanID() != a.SpanContext.SpanID() {
		t.Errorf("B's term links to %v/%v, want A's term span %v/%v", l.SpanContext.TraceID(), l.SpanContext.SpanID(),
			a.SpanContext.TraceID(), a.SpanContext.SpanID())
	}
	if v, ok := attrOf(l.Attributes, telnames.AttrFence); !ok || v.AsInt64() != termA {
		t.Errorf("the link's lockkit.fence = %v (%v), want A's term %d", v.AsInt64(), ok, termA)
	}
}
