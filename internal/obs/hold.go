package obs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/telemetry"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// noopSpan stands in for spans when tracing is off; boxed once, so using it never
// allocates.
var noopSpan trace.Span = tracenoop.Span{}

// internalKind is the start option of every lockkit span, built once: building it per
// call would allocate.
var internalKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// Hold is the telemetry of one hold of one lock: the hold span and its acquire,
// renew and release children, and the metrics they record. Domain.StartHold returns
// it; a nil *Hold (what StartHold returns when telemetry is off) is valid and every
// method on it returns at once.
//
// Call order: StartHold, StartAcquire, (Defer,) Retry (any number), EndAcquire
// (or Settle after Defer), then, if
// acquired, StartRenew/Step.End (any number, from the renewal goroutine), Lost
// (at most once), StartRelease/Step.End, and last End. StartRenew, Lost and End
// may run concurrently with each other once EndAcquire has returned.
type Hold struct {
	d      *Domain
	tracer trace.Tracer // nil when not tracing
	m      *meters      // nil when no metric records
	span   trace.Span   // the hold span; noopSpan when not tracing
	keyKV  attribute.KeyValue
	hasKey bool

	acquireSpan  trace.Span
	acquireStart time.Time

	// Set by EndAcquire, read-only afterwards.
	acquired  bool
	heldSince time.Time

	// pending is set between Defer and Settle: the acquisition is one of a
	// set (DoAll), made of passes whose outcomes are not the hold's.
	pending atomic.Bool
}

// Defer makes the hold the telemetry of a lock taken as one of a set
// (DoAll): the set is taken in passes, each lock's in each pass possibly
// taken and given back, and the hold records one acquisition over all of
// them. Until Settle, EndAcquire, End, Lost and StartRelease record nothing
// (they describe one pass); Retry, Queued and StartRenew record as usual.
func (h *Hold) Defer() {
	if h != nil {
		h.pending.Store(true)
	}
}

// Settle ends a deferred acquisition with the set's result: the acquire
// span and metrics as EndAcquire records them, and, unless acquired, the
// hold with the same outcome.
func (h *Hold) Settle(r AcquireResult) {
	if h == nil {
		return
	}
	h.pending.Store(false)
	h.EndAcquire(r)
	if validOutcome(r.Outcome) != telnames.OutcomeAcquired {
		h.End(r.Outcome, r.Err)
	}
}

// StartHold starts the hold span, named "lockkit.hold <domain>", as a child of the
// span in ctx, and returns a ctx carrying it: run the caller's function with that
// ctx so its spans nest under the lock. When telemetry is off it returns ctx itself
// and a nil *Hold, allocating nothing.
func (d *Domain) StartHold(ctx context.Context, key string) (context.Context, *Hold) {
	if d == nil {
		return ctx, nil
	}
	in := d.in
	tracer := in.tracer()
	m := in.meters()
	if m != nil && !m.holdMetricsOn(ctx) {
		m = nil
	}
	if tracer == nil && m == nil {
		return ctx, nil
	}
	h := &Hold{d: d, tracer: tracer, m: m, span: noopSpan, acquireSpan: noopSpan}
	if tracer != nil {
		ctx, h.span = tracer.Start(ctx, d.holdName, internalKind...)
		if h.span.IsRecording() {
			h.keyKV, h.hasKey = in.keyAttr(key)
			h.span.SetAttributes(h.identity(nil)...)
		}
	}
	return ctx, h
}

// StartAcquire starts the acquire span, "lockkit.acquire <domain>", as a child of
// the hold span, and returns a ctx carrying it for the acquire's Redis calls.
func (h *Hold) StartAcquire(ctx context.Context) context.Context {
	if h == nil {
		return ctx
	}
	if h.tracer != nil {
		ctx, h.acquireSpan = h.startChild(ctx, h.d.acquireName)
	}
	h.acquireStart = time.Now()
	return ctx
}

// Retry adds a lockkit.retry event to the acquire span: attempt (from 1) failed with
// reason (usually telnames.OutcomeContended) and the next attempt follows after backoff.
func (h *Hold) Retry(attempt int, backoff time.Duration, reason telnames.Outcome) {
	if h == nil || !h.acquireSpan.IsRecording() {
		return
	}
	h.acquireSpan.AddEvent(telnames.EventRetry, trace.WithAttributes(
		telnames.AttrRetryAttempt.Int(attempt),
		telnames.AttrRetryBackoff.Float64(backoff.Seconds()),
		outcomeAttrs[validOutcome(reason)],
	))
}

// AcquireResult describes how an acquisition ended, for Hold.EndAcquire.
type AcquireResult struct {
	// Outcome is telnames.OutcomeAcquired, or why not: telnames.OutcomeContended (single attempt),
	// telnames.OutcomeExhausted, telnames.OutcomeTimeout, telnames.OutcomeCanceled, telnames.OutcomeUnavailable,
	// telnames.OutcomeBreakerOpen, telnames.OutcomeClosed, telnames.OutcomeError.
	Outcome telnames.Outcome
	// Attempts is the number of attempts made, at least 1 once one was sent.
	Attempts int
	// Contended reports whether the first attempt found the lock held: the caller
	// had to wait (Do) or was turned away (TryDo). It feeds the contention rate.
	Contended bool
	// Fence is the lease's fencing number; 0 when the domain does not fence.
	Fence int64
	// Err is the error returned to the caller, if any; its message is used only as
	// the status description of a failure, and only with telemetry.KeyRaw.
	Err error
}

// EndAcquire ends the acquire span and records the acquisition metrics. With
// telnames.OutcomeAcquired the hold begins: hold time is measured from here. On a timeout or
// exhausted attempts it adds the matching event to the acquire span.
func (h *Hold) EndAcquire(r AcquireResult) {
	if h == nil || h.pending.Load() {
		return
	}
	now := time.Now()
	o := validOutcome(r.Outcome)
	d := h.d
	wait := now.Sub(h.acquireStart)
	if h.acquireStart.IsZero() {
		wait = 0
	}

	if m := h.m; m != nil {
		ctx := context.Background()
		m.acquireDuration.Record(ctx, wait.Seconds(), d.recordByOutcome[o]...)
		if r.Attempts > 0 {
			m.acquireAttempts.Record(ctx, int64(r.Attempts), d.recordByOutcome[o]...)
		}
		if r.Contended {
			m.acquireContended.Add(ctx, 1, d.addByOutcome[o]...)
		}
	}
	if o == telnames.OutcomeAcquired {
		h.acquired = true
		h.heldSince = now
	}

	if s := h.acquireSpan; s.IsRecording() {
		waitKV := telnames.AttrAcquireWait.Float64(wait.Seconds())
		attemptsKV := telnames.AttrAttempts.Int(r.Attempts)
		kvs := append(h.identity(make([]attribute.KeyValue, 0, 6)), outcomeAttrs[o], attemptsKV, waitKV)
		if r.Fence != 0 {
			kvs = append(kvs, telnames.AttrFence.Int64(r.Fence))
		}
		s.SetAttributes(kvs...)
		switch o {
		case telnames.OutcomeTimeout:
			s.AddEvent(telnames.EventAcquireTimeout, trace.WithAttributes(attemptsKV, waitKV))
		case telnames.OutcomeExhausted:
			s.AddEvent(telnames.EventAcquireExhausted, trace.WithAttributes(attemptsKV, waitKV))
		}
		h.setStatus(s, o, r.Err)
	}
	if h.tracer != nil {
		h.acquireSpan.End()
	}
	if o == telnames.OutcomeAcquired && r.Fence != 0 && h.span.IsRecording() {
		h.span.SetAttributes(telnames.AttrFence.Int64(r.Fence))
	}
}

// Lost records that the lease was lost while held: a lockkit.lease.lost event on the
// hold span and the lockkit.leases.lost counter. Call it once, when the lease's ctx
// is cancelled with ErrLockLost; end the hold later with telnames.OutcomeLost.
func (h *Hold) Lost(cause telnames.LostCause, err error) {
	if h == nil || h.pending.Load() {
		return
	}
	c := validCause(cause)
	if h.m != nil {
		h.m.leasesLost.Add(context.Background(), 1, h.d.addByCause[c]...)
	}
	if h.span.IsRecording() {
		h.span.SetAttributes(lostCauseAttrs[c])
		h.span.AddEvent(telnames.EventLeaseLost, trace.WithAttributes(lostCauseAttrs[c]))
	}
}

// End ends the hold span and, if the lock was acquired, records the hold time.
// outcome is how the hold ended: telnames.OutcomeReleased, telnames.OutcomeExpired, telnames.OutcomeLost, a
// release failure, or, when the lock was never acquired, the acquire's outcome. err
// is the error returned to the caller, for the status description (telemetry.KeyRaw only).
// The caller's own function error does not belong here: lockkit does not judge it.
func (h *Hold) End(outcome telnames.Outcome, err error) {
	if h == nil || h.pending.Load() {
		return
	}
	now := time.Now()
	o := validOutcome(outcome)
	if h.acquired && h.m != nil {
		h.m.holdDuration.Record(context.Background(), now.Sub(h.heldSince).Seconds(), h.d.recordByOutcome[o]...)
	}
	if s := h.span; s.IsRecording() {
		s.SetAttributes(outcomeAttrs[o])
		h.setStatus(s, o, err)
	}
	if h.tracer != nil {
		h.span.End()
	}
}

// Step is the telemetry of one extend or one release of a held lease,
// returned by Hold.StartRenew and Hold.StartRelease: a child span of the hold
// and the counter its End adds to. The zero Step is valid and records
// nothing.
type Step struct {
	h       *Hold
	span    trace.Span
	counter metric.Int64Counter // nil: no meter
}

// StartRenew starts a renew span, "lockkit.renew <domain>", as a child of the hold
// span whatever span ctx carries (the renewal goroutine's ctx has none), and returns
// a ctx carrying it for the extend's backend call. Its End counts lockkit.renewals:
// telnames.OutcomeOK, or telnames.OutcomeRefused (the key is no longer ours),
// telnames.OutcomeUnavailable, telnames.OutcomeBreakerOpen, telnames.OutcomeCanceled,
// telnames.OutcomeClosed, telnames.OutcomeError.
func (h *Hold) StartRenew(ctx context.Context) (context.Context, Step) {
	if h == nil {
		return ctx, Step{}
	}
	var counter metric.Int64Counter
	if h.m != nil {
		counter = h.m.renewals
	}
	return h.startStep(ctx, h.d.renewName, counter)
}

// StartRelease starts the release span, "lockkit.release <domain>", as a child of
// the hold span, and returns a ctx carrying it for the release's backend call. Its
// End counts lockkit.releases: telnames.OutcomeReleased, telnames.OutcomeExpired
// (ErrNotHeld: the key was no longer ours), or a failure (telnames.OutcomeUnavailable,
// telnames.OutcomeBreakerOpen, telnames.OutcomeCanceled, telnames.OutcomeClosed,
// telnames.OutcomeError).
func (h *Hold) StartRelease(ctx context.Context) (context.Context, Step) {
	if h == nil || h.pending.Load() {
		return ctx, Step{}
	}
	var counter metric.Int64Counter
	if h.m != nil {
		counter = h.m.releases
	}
	return h.startStep(ctx, h.d.releaseName, counter)
}

func (h *Hold) startStep(ctx context.Context, name string, counter metric.Int64Counter) (context.Context, Step) {
	st := Step{h: h, span: noopSpan, counter: counter}
	if h.tracer != nil {
		ctx, st.span = h.startChild(ctx, name)
	}
	return ctx, st
}

// End ends the step's span and counts it by outcome.
func (st Step) End(outcome telnames.Outcome, err error) {
	if st.h == nil {
		return
	}
	o := validOutcome(outcome)
	if st.counter != nil {
		st.counter.Add(context.Background(), 1, st.h.d.addByOutcome[o]...)
	}
	st.h.endChild(st.span, o, err)
}

// startChild starts a child span of the hold span, whatever span ctx carries. The
// child's domain and key attributes are set when it ends, with the rest, in one call:
// a child is sampled by its parent's decision, so a sampler gains nothing from seeing
// them at the start, and one call copies the span's attributes once instead of twice.
func (h *Hold) startChild(ctx context.Context, name string) (context.Context, trace.Span) {
	if trace.SpanContextFromContext(ctx).SpanID() != h.span.SpanContext().SpanID() {
		ctx = trace.ContextWithSpan(ctx, h.span)
	}
	return h.tracer.Start(ctx, name, internalKind...)
}

// endChild sets a renew or release span's attributes, all in one call, and its status,
// and ends it.
func (h *Hold) endChild(s trace.Span, o telnames.Outcome, err error) {
	if s.IsRecording() {
		s.SetAttributes(append(h.identity(make([]attribute.KeyValue, 0, 3)), outcomeAttrs[o])...)
		h.setStatus(s, o, err)
	}
	s.End()
}

// identity appends the domain, the kind (of an election or semaphore) and,
// unless omitted, key attributes to kvs.
func (h *Hold) identity(kvs []attribute.KeyValue) []attribute.KeyValue {
	if h.d.hasKind {
		kvs = append(kvs, h.d.kindAttr)
	}
	if h.hasKey {
		return append(kvs, h.d.domainAttr, h.keyKV)
	}
	return append(kvs, h.d.domainAttr)
}

// setStatus marks a failure: Error status and error.type. The description is the
// error's message with telemetry.KeyRaw (it may quote the key), the outcome's name otherwise.
func (h *Hold) setStatus(s trace.Span, o telnames.Outcome, err error) {
	if !o.Failure() {
		return
	}
	s.SetAttributes(errorTypeAttrs[o])
	desc := o.String()
	if err != nil && h.d.in.keyMode == telemetry.KeyRaw {
		desc = err.Error()
	}
	s.SetStatus(codes.Error, desc)
}

// Queued records a FIFO waiter's progress on the acquire span: position > 0
// sets lockkit.queue.position, its place in the queue as last seen (1 is the
// head); wake, when not "", adds a lockkit.wake event whose lockkit.wake.cause
// says what woke the waiter: "push" (a release or a leave published it),
// "timer" (the fallback timer: no push came in time) or "subscribed" (its
// subscription was made or remade, so it checks at once).
func (h *Hold) Queued(position int, wake string) {
	if h == nil || !h.acquireSpan.IsRecording() {
		return
	}
	if position > 0 {
		h.acquireSpan.SetAttributes(telnames.AttrQueuePosition.Int(position))
	}
	if wake != "" {
		h.acquireSpan.AddEvent(telnames.EventWake, trace.WithAttributes(telnames.AttrWakeCause.String(wake)))
	}
}

// LinkPrevious links the acquire span to the previous holder's hold span,
// given as "<trace id>-<span id>" in hex (what a FIFO release leaves with the
// queue); anything else is ignored.
func (h *Hold) LinkPrevious(prev string) {
	if h == nil || !h.acquireSpan.IsRecording() || len(prev) != 32+1+16 || prev[32] != '-' {
		return
	}
	if sc, ok := remoteSpan(prev[:32], prev[33:]); ok {
		h.acquireSpan.AddLink(trace.Link{SpanContext: sc})
	}
}

// LinkLeader links the hold span, an election's term, to the previous
// leader's term: its hold span, by the trace and span ids in hex that its
// holder description records, with lockkit.fence, its term number, on the
// link. Ids that are not valid are ignored.
func (h *Hold) LinkLeader(traceID, spanID string, term int64) {
	if h == nil || !h.span.IsRecording() {
		return
	}
	if sc, ok := remoteSpan(traceID, spanID); ok {
		h.span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{telnames.AttrFence.Int64(term)}})
	}
}

// remoteSpan is the sampled remote span context of these hex ids.
func remoteSpan(traceID, spanID string) (trace.SpanContext, bool) {
	tid, err1 := trace.TraceIDFromHex(traceID)
	sid, err2 := trace.SpanIDFromHex(spanID)
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	}), true
}
