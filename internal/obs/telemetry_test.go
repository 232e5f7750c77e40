package obs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/telemetry"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

const testKey = "lock:{table:42}"

// TestDoLifecycle walks a Do that waited twice, renewed once and released.
func TestDoLifecycle(t *testing.T) {
	r := newRig(t, Options{})
	dom := r.in.Domain("table")

	ctx, parent := r.startParent(context.Background())
	ctx, hold := dom.StartHold(ctx, testKey)
	if hold == nil {
		t.Fatal("StartHold returned a nil Hold with providers configured")
	}
	actx := hold.StartAcquire(ctx)
	if !trace.SpanFromContext(actx).IsRecording() {
		t.Fatal("acquire ctx carries no recording span")
	}
	hold.Retry(1, 10*time.Millisecond, telnames.OutcomeContended)
	hold.Retry(2, 25*time.Millisecond, telnames.OutcomeContended)
	time.Sleep(2 * time.Millisecond)
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 3, Contended: true, Fence: 7})

	_, app := r.tp.Tracer("app").Start(ctx, "book")
	app.End()

	// The renewal goroutine's ctx carries no span: the renew span must still be a
	// child of the hold.
	rctx, renewal := hold.StartRenew(context.Background())
	if !trace.SpanFromContext(rctx).IsRecording() {
		t.Fatal("renew ctx carries no recording span")
	}
	renewal.End(telnames.OutcomeOK, nil)

	_, release := hold.StartRelease(ctx)
	release.End(telnames.OutcomeReleased, nil)
	hold.End(telnames.OutcomeReleased, nil)
	parent.End()

	holdSpan := r.span(t, "lockkit.hold table")
	acq := r.span(t, "lockkit.acquire table")
	ren := r.span(t, "lockkit.renew table")
	rel := r.span(t, "lockkit.release table")
	req := r.span(t, "request")
	book := r.span(t, "book")

	if !isChildOf(holdSpan, req) {
		t.Error("hold span is not a child of the caller's span")
	}
	for name, s := range map[string]bool{
		"acquire": isChildOf(acq, holdSpan), "renew": isChildOf(ren, holdSpan),
		"release": isChildOf(rel, holdSpan), "caller's fn": isChildOf(book, holdSpan),
	} {
		if !s {
			t.Errorf("%s span is not a child of the hold span", name)
		}
	}
	for _, s := range []string{holdSpan.Name, acq.Name, ren.Name, rel.Name} {
		sp := r.span(t, s)
		if sp.InstrumentationScope.Name != telemetry.ScopeName || sp.InstrumentationScope.Version != telemetry.Version {
			t.Errorf("%s: scope %q %q", s, sp.InstrumentationScope.Name, sp.InstrumentationScope.Version)
		}
		if sp.SpanKind != trace.SpanKindInternal {
			t.Errorf("%s: kind %v", s, sp.SpanKind)
		}
		if sp.Status.Code != codes.Unset {
			t.Errorf("%s: status %v, want unset", s, sp.Status)
		}
	}

	wantAttrs(t, "hold", holdSpan.Attributes,
		telnames.AttrDomain.String("table"), telnames.AttrKey.String(testKey), telnames.AttrFence.Int64(7), telnames.AttrOutcome.String("released"))
	waitKV, ok := attrMap(acq.Attributes)[telnames.AttrAcquireWait]
	if !ok || waitKV.AsFloat64() <= 0 || waitKV.AsFloat64() > acq.EndTime.Sub(acq.StartTime).Seconds() {
		t.Errorf("acquire wait = %v, want within the span's duration %v", waitKV.Emit(), acq.EndTime.Sub(acq.StartTime))
	}
	wantAttrs(t, "acquire", acq.Attributes,
		telnames.AttrDomain.String("table"), telnames.AttrKey.String(testKey), telnames.AttrOutcome.String("acquired"),
		telnames.AttrAttempts.Int(3), telnames.AttrFence.Int64(7), telnames.AttrAcquireWait.Float64(waitKV.AsFloat64()))
	wantAttrs(t, "renew", ren.Attributes, telnames.AttrDomain.String("table"), telnames.AttrKey.String(testKey), telnames.AttrOutcome.String("ok"))
	wantAttrs(t, "release", rel.Attributes, telnames.AttrDomain.String("table"), telnames.AttrKey.String(testKey), telnames.AttrOutcome.String("released"))

	if len(acq.Events) != 2 {
		t.Fatalf("acquire events = %v, want 2 retries", acq.Events)
	}
	for i, backoff := range []float64{0.010, 0.025} {
		ev := acq.Events[i]
		if ev.Name != telnames.EventRetry {
			t.Errorf("event %d = %q", i, ev.Name)
		}
		wantAttrs(t, "retry event", ev.Attributes,
			telnames.AttrRetryAttempt.Int(i+1), telnames.AttrRetryBackoff.Float64(backoff), telnames.AttrOutcome.String("contended"))
	}
	if len(holdSpan.Events) != 0 || len(ren.Events) != 0 || len(rel.Events) != 0 {
		t.Errorf("unexpected events: hold %v renew %v release %v", holdSpan.Events, ren.Events, rel.Events)
	}

	ms := r.metrics(t)
	tableAcquired := "lockkit.domain=table,lockkit.outcome=acquired"
	ad := points(t, ms[telnames.MetricAcquireDuration])
	if p := ad[tableAcquired]; p.count != 1 || p.sum != waitKV.AsFloat64() {
		t.Errorf("%s = %+v, want 1 point of %v s", telnames.MetricAcquireDuration, ad, waitKV.AsFloat64())
	}
	if p := points(t, ms[telnames.MetricAcquireAttempts])[tableAcquired]; p.count != 1 || p.sum != 3 {
		t.Errorf("%s = %+v", telnames.MetricAcquireAttempts, p)
	}
	if p := points(t, ms[telnames.MetricAcquireContended]); len(p) != 1 || p[tableAcquired].sum != 1 {
		t.Errorf("%s = %+v", telnames.MetricAcquireContended, p)
	}
	hd := points(t, ms[telnames.MetricHoldDuration])
	if p := hd["lockkit.domain=table,lockkit.outcome=released"]; p.count != 1 || p.sum <= 0 || p.sum > holdSpan.EndTime.Sub(holdSpan.StartTime).Seconds() {
		t.Errorf("%s = %+v", telnames.MetricHoldDuration, hd)
	}
	if p := points(t, ms[telnames.MetricRenewals]); len(p) != 1 || p["lockkit.domain=table,lockkit.outcome=ok"].sum != 1 {
		t.Errorf("%s = %+v", telnames.MetricRenewals, p)
	}
	if p := points(t, ms[telnames.MetricReleases]); len(p) != 1 || p["lockkit.domain=table,lockkit.outcome=released"].sum != 1 {
		t.Errorf("%s = %+v", telnames.MetricReleases, p)
	}
	if _, ok := ms[telnames.MetricLeasesLost]; ok {
		t.Errorf("%s recorded without a lost lease", telnames.MetricLeasesLost)
	}
	for name, unit := range map[string]string{
		telnames.MetricAcquireDuration: "s", telnames.MetricAcquireAttempts: "{attempt}", telnames.MetricAcquireContended: "{acquire}",
		telnames.MetricHoldDuration: "s", telnames.MetricRenewals: "{renewal}", telnames.MetricReleases: "{release}",
	} {
		if ms[name].Unit != unit {
			t.Errorf("%s unit = %q, want %q", name, ms[name].Unit, unit)
		}
	}
}

// TestTryDoContended: a single attempt that found the lock held is an outcome, not an
// error, and there is no hold time.
func TestTryDoContended(t *testing.T) {
	r := newRig(t, Options{})
	dom := r.in.Domain("user_digest")
	ctx, hold := dom.StartHold(context.Background(), "lock:{user:1:digest}")
	hold.StartAcquire(ctx)
	errNotAcquired := errors.New("lockkit: not acquired")
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeContended, Attempts: 1, Contended: true, Err: errNotAcquired})
	hold.End(telnames.OutcomeContended, errNotAcquired)

	for _, name := range []string{"lockkit.hold user_digest", "lockkit.acquire user_digest"} {
		s := r.span(t, name)
		if s.Status.Code != codes.Unset {
			t.Errorf("%s: status %v, want unset", name, s.Status)
		}
		if hasAttr(s.Attributes, telnames.AttrErrorType) {
			t.Errorf("%s: error.type set on contention", name)
		}
		if v := attrMap(s.Attributes)[telnames.AttrOutcome].AsString(); v != "contended" {
			t.Errorf("%s: outcome %q", name, v)
		}
		if len(s.Events) != 0 {
			t.Errorf("%s: events %v", name, s.Events)
		}
	}
	if hasAttr(r.span(t, "lockkit.acquire user_digest").Attributes, telnames.AttrFence) {
		t.Error("fence attribute set without a fence")
	}
	ms := r.metrics(t)
	want := "lockkit.domain=user_digest,lockkit.outcome=contended"
	if p := points(t, ms[telnames.MetricAcquireContended]); p[want].sum != 1 {
		t.Errorf("contended = %+v", p)
	}
	if p := points(t, ms[telnames.MetricAcquireDuration]); p[want].count != 1 {
		t.Errorf("acquire duration = %+v", p)
	}
	if _, ok := ms[telnames.MetricHoldDuration]; ok {
		t.Error("hold duration recorded for a lock never acquired")
	}
}

// TestAcquireFailures: each way an acquisition can end without the lock.
func TestAcquireFailures(t *testing.T) {
	for _, tc := range []struct {
		outcome   telnames.Outcome
		event     string // "" = none
		failure   bool
		errorType string
	}{
		{telnames.OutcomeTimeout, telnames.EventAcquireTimeout, true, "timeout"},
		{telnames.OutcomeExhausted, telnames.EventAcquireExhausted, true, "exhausted"},
		{telnames.OutcomeUnavailable, "", true, "unavailable"},
		{telnames.OutcomeBreakerOpen, "", true, "breaker_open"},
		{telnames.OutcomeClosed, "", true, "closed"},
		{telnames.OutcomeError, "", true, "_OTHER"},
		{telnames.OutcomeCanceled, "", false, ""},
	} {
		t.Run(tc.outcome.String(), func(t *testing.T) {
			r := newRig(t, Options{})
			ctx, hold := r.in.Domain("table").StartHold(context.Background(), testKey)
			hold.StartAcquire(ctx)
			hold.Retry(1, time.Millisecond, telnames.OutcomeContended)
			err := errors.New("lockkit: " + tc.outcome.String() + " acquiring " + testKey)
			hold.EndAcquire(AcquireResult{Outcome: tc.outcome, Attempts: 4, Contended: true, Err: err})
			hold.End(tc.outcome, err)

			acq := r.span(t, "lockkit.acquire table")
			holdSpan := r.span(t, "lockkit.hold table")
			var names []string
			for _, e := range acq.Events {
				names = append(names, e.Name)
			}
			want := []string{telnames.EventRetry}
			if tc.event != "" {
				want = append(want, tc.event)
				ev := acq.Events[len(acq.Events)-1]
				wantAttrs(t, "event", ev.Attributes, telnames.AttrAttempts.Int(4),
					telnames.AttrAcquireWait.Float64(attrMap(acq.Attributes)[telnames.AttrAcquireWait].AsFloat64()))
			}
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("events = %v, want %v", names, want)
			}
			for _, s := range []struct {
				name string
				span tracetest.SpanStub
			}{{"acquire", acq}, {"hold", holdSpan}} {
				gotType := attrMap(s.span.Attributes)[telnames.AttrErrorType].AsString()
				if tc.failure {
					if s.span.Status.Code != codes.Error || s.span.Status.Description != err.Error() {
						t.Errorf("%s: status %+v, want Error %q", s.name, s.span.Status, err)
					}
					if gotType != tc.errorType {
						t.Errorf("%s: error.type %q, want %q", s.name, gotType, tc.errorType)
					}
				} else if s.span.Status.Code != codes.Unset || hasAttr(s.span.Attributes, telnames.AttrErrorType) {
					t.Errorf("%s: status %+v error.type %q, want neither", s.name, s.span.Status, gotType)
				}
				if v := attrMap(s.span.Attributes)[telnames.AttrOutcome].AsString(); v != tc.outcome.String() {
					t.Errorf("%s: outcome %q", s.name, v)
				}
			}
			ms := r.metrics(t)
			key := "lockkit.domain=table,lockkit.outcome=" + tc.outcome.String()
			if p := points(t, ms[telnames.MetricAcquireAttempts])[key]; p.count != 1 || p.sum != 4 {
				t.Errorf("attempts = %+v", p)
			}
			if _, ok := ms[telnames.MetricHoldDuration]; ok {
				t.Error("hold duration recorded for a lock never acquired")
			}
		})
	}
}

// TestLostLease: the lease is lost while held; renew refused, release finds the key
// gone, the hold ends lost.
func TestLostLease(t *testing.T) {
	r := newRig(t, Options{})
	ctx, hold := r.in.Domain("table").StartHold(context.Background(), testKey)
	hold.StartAcquire(ctx)
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 1})

	_, ok := hold.StartRenew(context.Background())
	ok.End(telnames.OutcomeOK, nil)
	_, refused := hold.StartRenew(context.Background())
	errRefused := errors.New("lockkit: extend refused")
	refused.End(telnames.OutcomeRefused, errRefused)
	hold.Lost(telnames.LostRefused, errRefused)

	_, rel := hold.StartRelease(ctx)
	errNotHeld := errors.New("lockkit: not held")
	rel.End(telnames.OutcomeExpired, errNotHeld)
	errLost := errors.New("lockkit: lock lost")
	hold.End(telnames.OutcomeLost, errLost)

	holdSpan := r.span(t, "lockkit.hold table")
	if len(holdSpan.Events) != 1 || holdSpan.Events[0].Name != telnames.EventLeaseLost {
		t.Fatalf("hold events = %v", holdSpan.Events)
	}
	wantAttrs(t, "lost event", holdSpan.Events[0].Attributes, telnames.AttrLostCause.String("refused"))
	wantAttrs(t, "hold", holdSpan.Attributes, telnames.AttrDomain.String("table"), telnames.AttrKey.String(testKey),
		telnames.AttrLostCause.String("refused"), telnames.AttrOutcome.String("lost"), telnames.AttrErrorType.String("lost"))
	if holdSpan.Status.Code != codes.Error || holdSpan.Status.Description != errLost.Error() {
		t.Errorf("hold status %+v", holdSpan.Status)
	}
	var renewOutcomes []string
	for _, s := range r.spans.GetSpans() {
		if s.Name == "lockkit.renew table" {
			renewOutcomes = append(renewOutcomes, attrMap(s.Attributes)[telnames.AttrOutcome].AsString()+"/"+s.Status.Code.String())
			if !isChildOf(s, holdSpan) {
				t.Error("renew span is not a child of the hold span")
			}
		}
	}
	if strings.Join(renewOutcomes, " ") != "ok/Unset refused/Error" {
		t.Errorf("renew spans = %v", renewOutcomes)
	}
	relSpan := r.span(t, "lockkit.release table")
	if relSpan.Status.Code != codes.Error || attrMap(relSpan.Attributes)[telnames.AttrErrorType].AsString() != "expired" {
		t.Errorf("release span %v %v", relSpan.Status, relSpan.Attributes)
	}

	ms := r.metrics(t)
	if p := points(t, ms[telnames.MetricLeasesLost]); len(p) != 1 || p["lockkit.domain=table,lockkit.lost.cause=refused"].sum != 1 {
		t.Errorf("%s = %+v", telnames.MetricLeasesLost, p)
	}
	if p := points(t, ms[telnames.MetricRenewals]); len(p) != 2 || p["lockkit.domain=table,lockkit.outcome=ok"].sum != 1 ||
		p["lockkit.domain=table,lockkit.outcome=refused"].sum != 1 {
		t.Errorf("%s = %+v", telnames.MetricRenewals, p)
	}
	if p := points(t, ms[telnames.MetricReleases]); len(p) != 1 || p["lockkit.domain=table,lockkit.outcome=expired"].sum != 1 {
		t.Errorf("%s = %+v", telnames.MetricReleases, p)
	}
	if p := points(t, ms[telnames.MetricHoldDuration]); len(p) != 1 || p["lockkit.domain=table,lockkit.outcome=lost"].count != 1 {
		t.Errorf("%s = %+v", telnames.MetricHoldDuration, p)
	}
}

func TestKeyModes(t *testing.T) {
	secret := []byte("s3cret")
	for _, tc := range []struct {
		name    string
		opts    Options
		wantKey string // "" = no attribute
	}{
		{"raw", Options{KeyMode: telemetry.KeyRaw}, testKey},
		{"hashed", Options{KeyMode: telemetry.KeyHashed}, telemetry.HashKey(testKey, nil)},
		{"hmac", Options{KeyMode: telemetry.KeyHashed, KeyHashSecret: secret}, telemetry.HashKey(testKey, secret)},
		{"omitted", Options{KeyMode: telemetry.KeyOmitted}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.opts)
			ctx, hold := r.in.Domain("table").StartHold(context.Background(), testKey)
			hold.StartAcquire(ctx)
			err := errors.New("redis: connection refused for " + testKey)
			hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeUnavailable, Attempts: 1, Err: err})
			hold.End(telnames.OutcomeUnavailable, err)
			for _, s := range r.spans.GetSpans() {
				got, has := attrMap(s.Attributes)[telnames.AttrKey]
				switch {
				case tc.wantKey == "" && has:
					t.Errorf("%s: key recorded: %v", s.Name, got.Emit())
				case tc.wantKey != "" && got.AsString() != tc.wantKey:
					t.Errorf("%s: key = %q, want %q", s.Name, got.AsString(), tc.wantKey)
				}
				wantDesc := "unavailable"
				if tc.opts.KeyMode == telemetry.KeyRaw {
					wantDesc = err.Error()
				}
				if s.Status.Description != wantDesc {
					t.Errorf("%s: status description %q, want %q", s.Name, s.Status.Description, wantDesc)
				}
			}
		})
	}
	if h := telemetry.HashKey(testKey, nil); len(h) != 32 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Errorf("HashKey = %q, want 32 lower-case hex digits", h)
	}
	if telemetry.HashKey(testKey, nil) == telemetry.HashKey(testKey, secret) || telemetry.HashKey(testKey, secret) == telemetry.HashKey("other", secret) {
		t.Error("HashKey does not depend on its inputs")
	}
	// Pinned, so a backend search by hash stays valid across versions.
	if got, want := telemetry.HashKey("lock:{table:42}", nil), "7064e6e9059f5c4153ecb8251eae8a48"; got != want {
		t.Errorf("HashKey = %q, want %q (printf %%s 'lock:{table:42}' | sha256sum | cut -c1-32)", got, want)
	}
}

// TestUnsampled: with a sampler that drops everything, no span is exported, no
// attribute is built, and metrics still record.
func TestUnsampled(t *testing.T) {
	r := newRig(t, Options{KeyMode: telemetry.KeyHashed}, sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, hold := r.in.Domain("table").StartHold(context.Background(), testKey)
	hold.StartAcquire(ctx)
	hold.Retry(1, time.Millisecond, telnames.OutcomeContended)
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true})
	if hold.hasKey {
		t.Error("key hashed for an unsampled hold")
	}
	_, rn := hold.StartRenew(context.Background())
	rn.End(telnames.OutcomeOK, nil)
	hold.Lost(telnames.LostDeadline, nil)
	_, rel := hold.StartRelease(ctx)
	rel.End(telnames.OutcomeExpired, nil)
	hold.End(telnames.OutcomeLost, nil)
	if n := len(r.spans.GetSpans()); n != 0 {
		t.Errorf("%d spans exported with NeverSample", n)
	}
	ms := r.metrics(t)
	for _, name := range []string{telnames.MetricAcquireDuration, telnames.MetricAcquireAttempts, telnames.MetricAcquireContended, telnames.MetricHoldDuration, telnames.MetricRenewals, telnames.MetricLeasesLost, telnames.MetricReleases} {
		if _, ok := ms[name]; !ok {
			t.Errorf("%s not recorded", name)
		}
	}
	if p := points(t, ms[telnames.MetricLeasesLost]); p["lockkit.domain=table,lockkit.lost.cause=deadline"].sum != 1 {
		t.Errorf("lost = %+v", p)
	}
}

// TestMetricsOnly: a no-op tracer provider and a real meter provider.
func TestMetricsOnly(t *testing.T) {
	r := newRig(t, Options{TracerProvider: tracenoop.NewTracerProvider()})
	ctx := context.Background()
	got, hold := r.in.Domain("table").StartHold(ctx, testKey)
	if hold == nil {
		t.Fatal("nil Hold with a meter provider configured")
	}
	if got != ctx {
		t.Error("StartHold changed ctx without tracing")
	}
	if hold.StartAcquire(ctx) != ctx {
		t.Error("StartAcquire changed ctx without tracing")
	}
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 1})
	hold.End(telnames.OutcomeReleased, nil)
	ms := r.metrics(t)
	if p := points(t, ms[telnames.MetricHoldDuration]); p["lockkit.domain=table,lockkit.outcome=released"].count != 1 {
		t.Errorf("hold duration = %+v", p)
	}
}

// TestTracingOnly: a real tracer provider and a no-op meter provider.
func TestTracingOnly(t *testing.T) {
	r := newRig(t, Options{MeterProvider: nil})
	in, err := New(Options{TracerProvider: r.tp, MeterProvider: noopMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, hold := in.Domain("table").StartHold(context.Background(), testKey)
	hold.StartAcquire(ctx)
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 1})
	hold.End(telnames.OutcomeReleased, nil)
	if n := len(r.spans.GetSpans()); n != 2 {
		t.Errorf("%d spans, want 2", n)
	}
}

// TestOff: with the global providers at their defaults, nothing is started and
// nothing allocates.
func TestOff(t *testing.T) {
	in, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	dom := in.Domain("table")
	ctx := context.Background()
	got, hold := dom.StartHold(ctx, testKey)
	if hold != nil || got != ctx {
		t.Fatalf("StartHold = %v, %v; want ctx unchanged and a nil Hold", got, hold)
	}
	allocs := testing.AllocsPerRun(1000, func() { lifecycle(ctx, dom) })
	if allocs != 0 {
		t.Errorf("lifecycle with telemetry off allocates %v times, want 0", allocs)
	}

	// No-op providers passed explicitly are off too.
	in, err = New(Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: noopMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	dom = in.Domain("table")
	if allocs := testing.AllocsPerRun(1000, func() { lifecycle(ctx, dom) }); allocs != 0 {
		t.Errorf("lifecycle with no-op providers allocates %v times, want 0", allocs)
	}
}

// lifecycle is one full Do: hold, acquire with a retry, renew, release.
func lifecycle(ctx context.Context, dom *Domain) {
	ctx, hold := dom.StartHold(ctx, testKey)
	hold.StartAcquire(ctx)
	hold.Retry(1, time.Millisecond, telnames.OutcomeContended)
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 2, Contended: true, Fence: 9})
	_, rn := hold.StartRenew(ctx)
	rn.End(telnames.OutcomeOK, nil)
	_, rel := hold.StartRelease(ctx)
	rel.End(telnames.OutcomeReleased, nil)
	hold.End(telnames.OutcomeReleased, nil)
}

// TestNil: the nil and zero values the runtime may hold are all safe.
func TestNil(t *testing.T) {
	var in *Instruments
	dom := in.Domain("table")
	if dom != nil {
		t.Fatal("nil Instruments returned a Domain")
	}
	if dom.Name() != "" {
		t.Error("nil Domain has a name")
	}
	in.BreakerState(context.Background(), "n", telnames.BreakerOpen)
	lifecycle(context.Background(), dom)
	var h *Hold
	h.Lost(telnames.LostDeadline, nil)
	Step{}.End(telnames.OutcomeOK, nil)
}

func TestBreakerState(t *testing.T) {
	r := newRig(t, Options{})
	ctx := context.Background()
	r.in.BreakerState(ctx, "127.0.0.1:6379", telnames.BreakerClosed)
	r.in.BreakerState(ctx, "127.0.0.1:6380", telnames.BreakerClosed)
	r.in.BreakerState(ctx, "127.0.0.1:6379", telnames.BreakerOpen)
	m := r.metrics(t)[telnames.MetricBreakerState]
	if m.Unit != "{state}" {
		t.Errorf("unit %q", m.Unit)
	}
	// One series per node and state: 1 for the breaker's state, 0 for the others.
	want := func(node, in string) map[string]float64 {
		m := map[string]float64{}
		for _, s := range []string{"closed", "half_open", "open"} {
			m["lockkit.breaker.node="+node+",lockkit.breaker.state="+s] = 0
			if s == in {
				m["lockkit.breaker.node="+node+",lockkit.breaker.state="+s] = 1
			}
		}
		return m
	}
	check := func(p map[string]point) {
		t.Helper()
		w := want("127.0.0.1:6379", "open")
		for k, v := range want("127.0.0.1:6380", "closed") {
			w[k] = v
		}
		if len(p) != len(w) {
			t.Errorf("breaker state = %+v, want %v", p, w)
		}
		for k, v := range w {
			if got, ok := p[k]; !ok || got.sum != v {
				t.Errorf("breaker state {%s} = %+v (present %v), want %v", k, got, ok, v)
			}
		}
	}
	check(points(t, m))
	// The last value stays reported across collections.
	check(points(t, r.metrics(t)[telnames.MetricBreakerState]))
}

// TestConcurrentRenewLostEnd runs renewals, a loss and the end of the hold at once,
// as the runtime does; meaningful under -race.
func TestConcurrentRenewLostEnd(t *testing.T) {
	r := newRig(t, Options{})
	ctx, hold := r.in.Domain("table").StartHold(context.Background(), testKey)
	hold.StartAcquire(ctx)
	hold.EndAcquire(AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: 1})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				_, rn := hold.StartRenew(context.Background())
				rn.End(telnames.OutcomeOK, nil)
			}
		})
	}
	wg.Go(func() { hold.Lost(telnames.LostDeadline, nil) })
	wg.Go(func() {
		_, rel := hold.StartRelease(ctx)
		rel.End(telnames.OutcomeReleased, nil)
		hold.End(telnames.OutcomeLost, nil)
	})
	wg.Wait()
	if p := points(t, r.metrics(t)[telnames.MetricRenewals]); p["lockkit.domain=table,lockkit.outcome=ok"].sum != 80 {
		t.Errorf("renewals = %+v", p)
	}
}

// TestNewErrorsKeepWorking: instrument creation errors are returned, and the
// Instruments still work.
func TestNewErrorsKeepWorking(t *testing.T) {
	mp := &failingMeterProvider{MeterProvider: sdkmetric.NewMeterProvider()}
	in, err := New(Options{MeterProvider: mp, TracerProvider: tracenoop.NewTracerProvider()})
	if err == nil || in == nil {
		t.Fatalf("New = %v, %v; want Instruments and an error", in, err)
	}
	lifecycle(context.Background(), in.Domain("table"))
	in.BreakerState(context.Background(), "n", telnames.BreakerOpen)
}

func noopMeterProvider() metric.MeterProvider { return metricnoop.NewMeterProvider() }

// failingMeterProvider returns meters whose counters fail to be created.
type failingMeterProvider struct{ metric.MeterProvider }

func (p *failingMeterProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return failingMeter{p.MeterProvider.Meter(name, opts...)}
}

type failingMeter struct{ metric.Meter }

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("counter refused")
}
