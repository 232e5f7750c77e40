package obs

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/telemetry"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Options configures Instruments. The zero value uses the global providers and
// records keys raw.
type Options struct {
	// TracerProvider creates lockkit's tracer. Nil means the global provider,
	// looked up at each hold, so a provider installed later (otel.SetTracerProvider,
	// Setup), or replaced, is followed.
	TracerProvider trace.TracerProvider
	// MeterProvider creates lockkit's instruments. Nil means the global provider,
	// followed the same way.
	MeterProvider metric.MeterProvider
	// KeyMode says how lock keys are recorded on spans: raw (default), hashed or
	// omitted.
	KeyMode telemetry.KeyMode
	// KeyHashSecret keys the hash of telemetry.KeyHashed: with a secret the hash is
	// HMAC-SHA-256 and cannot be reversed by hashing guessed keys. Nil means plain
	// SHA-256.
	KeyHashSecret []byte
}

// Instruments holds lockkit's tracer and metric instruments. Create one per lockkit
// client with New; it is safe for concurrent use. A nil *Instruments is valid and
// records nothing.
type Instruments struct {
	keyMode   telemetry.KeyMode
	keySecret []byte

	// An explicit Options.TracerProvider: its tracer, nil when it is a no-op one.
	fixedTracer       trace.Tracer
	followGlobalTrace bool
	globalTracer      atomic.Pointer[tracerOf] // the tracer of the current global provider

	// An explicit Options.MeterProvider: its instruments, nil when it is a no-op one.
	fixedMeters        *meters
	followGlobalMeters bool
	globalMeters       atomic.Pointer[meters] // the instruments of the current global provider
}

// tracerOf is a provider's lockkit tracer.
type tracerOf struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

// meters is lockkit's set of metric instruments from one meter provider.
type meters struct {
	provider metric.MeterProvider

	acquireDuration  metric.Float64Histogram
	acquireAttempts  metric.Int64Histogram
	acquireContended metric.Int64Counter
	holdDuration     metric.Float64Histogram
	renewals         metric.Int64Counter
	leasesLost       metric.Int64Counter
	releases         metric.Int64Counter
	breakerState     metric.Int64Gauge
}

// Histogram bucket boundaries, in the instruments' units. Acquisitions are
// milliseconds when free and up to the domain's max wait when contended; holds run
// from milliseconds to minutes.
var (
	acquireDurationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	acquireAttemptBuckets  = []float64{1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50}
	holdDurationBuckets    = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
)

// New creates lockkit's tracer and metric instruments, once. It never returns a
// nil *Instruments: when an instrument cannot be created, the error is returned and
// that instrument records nothing, the rest work. (Instruments created later for a
// newly installed global meter provider report such errors to otel.Handle.)
func New(o Options) (*Instruments, error) {
	in := &Instruments{keyMode: o.KeyMode, keySecret: bytes.Clone(o.KeyHashSecret)}

	if tp := o.TracerProvider; tp == nil {
		in.followGlobalTrace = true
		if tp := otel.GetTracerProvider(); tp != defaultGlobalTracerProvider {
			in.globalTracer.Store(&tracerOf{provider: tp, tracer: newTracer(tp)})
		}
	} else if !isNoopTracerProvider(tp) {
		in.fixedTracer = newTracer(tp)
	}

	var err error
	if mp := o.MeterProvider; mp == nil {
		in.followGlobalMeters = true
		if mp := otel.GetMeterProvider(); mp != defaultGlobalMeterProvider {
			var m *meters
			m, err = newMeters(mp)
			in.globalMeters.Store(m)
		}
	} else if !isNoopMeterProvider(mp) {
		in.fixedMeters, err = newMeters(mp)
	}
	return in, err
}

func newTracer(tp trace.TracerProvider) trace.Tracer {
	return tp.Tracer(telemetry.ScopeName, trace.WithInstrumentationVersion(telemetry.Version), trace.WithSchemaURL(semconv.SchemaURL))
}

// newMeters creates every instrument from mp.
func newMeters(mp metric.MeterProvider) (*meters, error) {
	m := mp.Meter(telemetry.ScopeName, metric.WithInstrumentationVersion(telemetry.Version), metric.WithSchemaURL(semconv.SchemaURL))
	ms := &meters{provider: mp}
	var errs []error
	h, err := m.Float64Histogram(telnames.MetricAcquireDuration, metric.WithUnit(unitOf(telnames.MetricAcquireDuration)),
		metric.WithDescription("Time lockkit acquisitions took, attempts and backoffs included."),
		metric.WithExplicitBucketBoundaries(acquireDurationBuckets...))
	ms.acquireDuration = instrument[metric.Float64Histogram](h, err, &errs, metricnoop.Float64Histogram{})

	ih, err := m.Int64Histogram(telnames.MetricAcquireAttempts, metric.WithUnit(unitOf(telnames.MetricAcquireAttempts)),
		metric.WithDescription("Attempts per lockkit acquisition."),
		metric.WithExplicitBucketBoundaries(acquireAttemptBuckets...))
	ms.acquireAttempts = instrument[metric.Int64Histogram](ih, err, &errs, metricnoop.Int64Histogram{})

	c, err := m.Int64Counter(telnames.MetricAcquireContended, metric.WithUnit(unitOf(telnames.MetricAcquireContended)),
		metric.WithDescription("Lockkit acquisitions whose first attempt found the lock held."))
	ms.acquireContended = instrument[metric.Int64Counter](c, err, &errs, metricnoop.Int64Counter{})

	h, err = m.Float64Histogram(telnames.MetricHoldDuration, metric.WithUnit(unitOf(telnames.MetricHoldDuration)),
		metric.WithDescription("Time lockkit leases were held, from acquisition to the end of the hold."),
		metric.WithExplicitBucketBoundaries(holdDurationBuckets...))
	ms.holdDuration = instrument[metric.Float64Histogram](h, err, &errs, metricnoop.Float64Histogram{})

	c, err = m.Int64Counter(telnames.MetricRenewals, metric.WithUnit(unitOf(telnames.MetricRenewals)),
		metric.WithDescription("Lockkit lease extends, by outcome."))
	ms.renewals = instrument[metric.Int64Counter](c, err, &errs, metricnoop.Int64Counter{})

	c, err = m.Int64Counter(telnames.MetricLeasesLost, metric.WithUnit(unitOf(telnames.MetricLeasesLost)),
		metric.WithDescription("Lockkit leases lost while held, by cause."))
	ms.leasesLost = instrument[metric.Int64Counter](c, err, &errs, metricnoop.Int64Counter{})

	c, err = m.Int64Counter(telnames.MetricReleases, metric.WithUnit(unitOf(telnames.MetricReleases)),
		metric.WithDescription("Lockkit releases, by outcome."))
	ms.releases = instrument[metric.Int64Counter](c, err, &errs, metricnoop.Int64Counter{})

	g, err := m.Int64Gauge(telnames.MetricBreakerState, metric.WithUnit(unitOf(telnames.MetricBreakerState)),
		metric.WithDescription("Lockkit circuit breaker state per backend node: 1 for the state (closed, half_open, open) the breaker is in, 0 for the others."))
	ms.breakerState = instrument[metric.Int64Gauge](g, err, &errs, metricnoop.Int64Gauge{})

	return ms, errors.Join(errs...)
}

// instrument keeps a created instrument, or falls back to the no-op one when the
// provider returned none, collecting the creation error either way.
func instrument[T any](inst T, err error, errs *[]error, noop T) T {
	if err != nil {
		*errs = append(*errs, err)
	}
	if any(inst) == nil {
		return noop
	}
	return inst
}

// BreakerChanged adds a lockkit.breaker.change event to the span in ctx, the
// operation whose outcome changed node's breaker from one state to another
// (state names: closed, half_open, open, as breaker.State.String spells them). It does nothing when that span is not
// recording.
func BreakerChanged(ctx context.Context, node, from, to string) {
	s := trace.SpanFromContext(ctx)
	if !s.IsRecording() {
		return
	}
	s.AddEvent(telnames.EventBreakerChange, trace.WithAttributes(telnames.AttrBreakerNode.String(node), telnames.AttrBreakerFrom.String(from), telnames.AttrBreakerTo.String(to)))
}

// RedlockNode adds a lockkit.redlock.node event to the span in ctx (a
// Redlock acquire span): what one node answered and how fast. It does
// nothing when that span is not recording.
func RedlockNode(ctx context.Context, node, result string, latency time.Duration, err error) {
	s := trace.SpanFromContext(ctx)
	if !s.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{telnames.AttrBreakerNode.String(node), telnames.AttrNodeResult.String(result), telnames.AttrNodeLatency.Float64(latency.Seconds())}
	if err != nil {
		attrs = append(attrs, telnames.AttrErrorType.String(result))
	}
	s.AddEvent(telnames.EventRedlockNode, trace.WithAttributes(attrs...))
}

// tracer returns the tracer a new hold uses, or nil when tracing is off. Starting a
// span through the global provider before one is installed allocates (a context
// and a boxed non-recording span), so with the global provider still at its
// default, or a no-op provider, lockkit does not call a tracer at all.
func (in *Instruments) tracer() trace.Tracer {
	if !in.followGlobalTrace {
		return in.fixedTracer
	}
	tp := otel.GetTracerProvider()
	if tp == defaultGlobalTracerProvider || isNoopTracerProvider(tp) {
		return nil
	}
	if cur := in.globalTracer.Load(); cur != nil && sameProvider(cur.provider, tp) {
		return cur.tracer
	}
	t := newTracer(tp) // a new global provider: follow it
	in.globalTracer.Store(&tracerOf{provider: tp, tracer: t})
	return t
}

// meters returns the instruments a new hold uses, or nil when metrics are off: the
// global provider still at its default, or a no-op provider.
func (in *Instruments) meters() *meters {
	if !in.followGlobalMeters {
		return in.fixedMeters
	}
	mp := otel.GetMeterProvider()
	if mp == defaultGlobalMeterProvider || isNoopMeterProvider(mp) {
		return nil
	}
	if cur := in.globalMeters.Load(); cur != nil && sameProvider(cur.provider, mp) {
		return cur
	}
	m, err := newMeters(mp) // a new global provider: follow it
	if err != nil {
		otel.Handle(err)
	}
	in.globalMeters.Store(m)
	return m
}

// holdMetricsOn reports whether any instrument of a hold records; a view may drop
// some, a provider without readers all.
func (m *meters) holdMetricsOn(ctx context.Context) bool {
	return m.acquireDuration.Enabled(ctx) || m.acquireAttempts.Enabled(ctx) ||
		m.acquireContended.Enabled(ctx) || m.holdDuration.Enabled(ctx) ||
		m.renewals.Enabled(ctx) || m.leasesLost.Enabled(ctx) || m.releases.Enabled(ctx)
}

// sameProvider reports whether a and b are the same provider, without panicking on
// a provider type that is not comparable (such a provider is treated as new every
// time: correct, only slower).
func sameProvider(a, b any) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta != nil && ta.Comparable() && a == b
}

// Domain returns the handle for one lock domain, with its span names and metric
// attribute sets built once. Call it once per domain (when the runtime binds a
// DomainSpec to its client) and keep it. A nil *Instruments returns a nil *Domain,
// which is valid and records nothing.
func (in *Instruments) Domain(name string) *Domain { return in.DomainKind(name, "") }

// DomainKind is Domain for a domain of a kind other than a lock ("election",
// "semaphore"): its spans and metrics also carry lockkit.kind, so that a
// campaign, a term, a permit's acquire, release and loss are told apart
// from a lock's. "" and "lock" add nothing.
func (in *Instruments) DomainKind(name, kind string) *Domain {
	if in == nil {
		return nil
	}
	d := &Domain{
		in:          in,
		name:        name,
		holdName:    telnames.SpanHold + " " + name,
		acquireName: telnames.SpanAcquire + " " + name,
		renewName:   telnames.SpanRenew + " " + name,
		releaseName: telnames.SpanRelease + " " + name,
		domainAttr:  telnames.AttrDomain.String(name),
	}
	base := []attribute.KeyValue{d.domainAttr}
	if kind != "" && kind != "lock" {
		d.kindAttr, d.hasKind = telnames.AttrKind.String(kind), true
		base = append(base, d.kindAttr)
	}
	for o := range numOutcomes {
		opt := metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], outcomeAttrs[o])...))
		d.addByOutcome[o] = []metric.AddOption{opt}
		d.recordByOutcome[o] = []metric.RecordOption{opt}
	}
	for c := range numLostCauses {
		opt := metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], lostCauseAttrs[c])...))
		d.addByCause[c] = []metric.AddOption{opt}
	}
	return d
}

// BreakerState records the circuit breaker state of one backend node: telnames.BreakerClosed,
// telnames.BreakerHalfOpen or telnames.BreakerOpen (breaker.State's numbers). The gauge
// (lockkit.breaker.status) gets one point per state, lockkit.breaker.state naming it: 1 for state, 0 for the others.
// Call it from the breaker's OnStateChange, and once with telnames.BreakerClosed when a
// breaker is created.
func (in *Instruments) BreakerState(ctx context.Context, node string, state int) {
	if in == nil {
		return
	}
	if m := in.meters(); m != nil && m.breakerState.Enabled(ctx) {
		nodeKV := telnames.AttrBreakerNode.String(node)
		for s := breaker.StateClosed; s <= breaker.StateOpen; s++ {
			var v int64
			if int(s) == state {
				v = 1
			}
			m.breakerState.Record(ctx, v, metric.WithAttributes(nodeKV, telnames.AttrBreakerState.String(s.String())))
		}
	}
}

// keyAttr returns the lockkit.key attribute for key per the key mode.
func (in *Instruments) keyAttr(key string) (attribute.KeyValue, bool) {
	switch in.keyMode {
	case telemetry.KeyRaw:
		return telnames.AttrKey.String(key), true
	case telemetry.KeyHashed:
		return telnames.AttrKey.String(telemetry.HashKey(key, in.keySecret)), true
	}
	return attribute.KeyValue{}, false
}

// defaultGlobalTracerProvider is the delegating provider that otel.GetTracerProvider
// returns until otel.SetTracerProvider is called. It is recorded only if it really is
// that (an otel-internal type): should otel change, lockkit merely loses the fast
// path and starts non-recording spans, which stays correct.
var defaultGlobalTracerProvider = func() trace.TracerProvider {
	if tp := otel.GetTracerProvider(); isOTelGlobalDelegate(tp) {
		return tp
	}
	return nil
}()

// defaultGlobalMeterProvider is the same for otel.GetMeterProvider.
var defaultGlobalMeterProvider = func() metric.MeterProvider {
	if mp := otel.GetMeterProvider(); isOTelGlobalDelegate(mp) {
		return mp
	}
	return nil
}()

func isOTelGlobalDelegate(provider any) bool {
	t := reflect.TypeOf(provider)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

func isNoopMeterProvider(mp metric.MeterProvider) bool {
	switch mp.(type) {
	case metricnoop.MeterProvider, *metricnoop.MeterProvider:
		return true
	}
	return false
}

func isNoopTracerProvider(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return true
	}
	return false
}

// Domain is the telemetry handle of one lock domain: its span names and the
// attribute sets of its metrics, built once by Instruments.Domain. A nil *Domain is
// valid and records nothing.
type Domain struct {
	in                                            *Instruments
	name                                          string
	holdName, acquireName, renewName, releaseName string
	domainAttr                                    attribute.KeyValue
	kindAttr                                      attribute.KeyValue // lockkit.kind, when hasKind
	hasKind                                       bool

	addByOutcome    [numOutcomes][]metric.AddOption
	recordByOutcome [numOutcomes][]metric.RecordOption
	addByCause      [numLostCauses][]metric.AddOption
}

// Tracing reports whether a hold started now would be traced: a tracer is
// set (its sampler may still drop the hold).
func (d *Domain) Tracing() bool { return d != nil && d.in.tracer() != nil }

// Name returns the domain's name.
func (d *Domain) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// units maps each metric name to its unit, from telemetry.Catalog: the
// catalog owns the units, and the instruments are created with them.
var units = sync.OnceValue(func() map[string]string {
	m := make(map[string]string)
	for _, e := range telemetry.Catalog() {
		if e.Kind == telemetry.KindMetric {
			m[e.Name] = e.Unit
		}
	}
	return m
})

func unitOf(metric string) string { return units()[metric] }
