// Package telemetry is lockkit's OpenTelemetry instrumentation: the span, event,
// attribute and metric names, the instruments that record them, and a log handler
// that stamps trace ids on log lines.
//
// The package imports only the OpenTelemetry API and the standard library, never
// the SDK or an exporter, so importing lockkit stays light; an application that
// wants OTLP export from the standard OTEL_* environment variables calls
// otelsetup.Setup (package telemetry/otelsetup) in its main. The package knows
// nothing of the lock runtime, which drives it through this API:
//
//	in, err := telemetry.New(telemetry.Options{})   // once per lockkit client
//	dom := in.Domain("table")                          // once per lock domain
//
//	ctx, hold := dom.StartHold(ctx, key)     // Do / Acquire: the span over the whole hold
//	actx := hold.StartAcquire(ctx)           // child span; pass actx to the Redis calls
//	hold.Retry(attempt, backoff, telemetry.OutcomeContended) // before each backoff sleep
//	hold.EndAcquire(telemetry.AcquireResult{Outcome: telemetry.OutcomeAcquired, ...})
//	... fn(ctx, lease) ...                   // ctx carries the hold span
//	rctx, r := hold.StartRenew(ctx)          // renewal goroutine, each extend
//	r.End(telemetry.OutcomeOK, nil)
//	hold.Lost(telemetry.LostRefused, err)    // when the lease is lost
//	rctx, rel := hold.StartRelease(ctx)
//	rel.End(telemetry.OutcomeReleased, nil)
//	hold.End(telemetry.OutcomeReleased, nil) // closes the hold span, records hold time
//
// # Cost when off
//
// With no provider configured (the global OpenTelemetry providers left at their
// defaults, or no-op providers passed in Options), Domain.StartHold returns a nil
// *Hold and the ctx unchanged, and every method of a nil *Hold, and of the zero
// Renewal and Release, returns at once: no allocation, a few nanoseconds per call.
// When on, span attributes are built only for recording (sampled) spans, and each
// domain's metric attribute sets are built once, in Instruments.Domain.
//
// # Names
//
// Span names are low-cardinality: "lockkit.acquire table", never the key or id.
// Catalog lists every span name pattern, event, attribute and metric (with its
// unit), so documentation can be checked against the code.
//
// # Outcomes and errors
//
// Every operation ends with an Outcome, recorded as the lockkit.outcome attribute on
// spans and metrics. Only failures (see Outcome.Failure) set the span status to Error
// and the error.type attribute; contention (OutcomeContended, a TryDo that found the
// lock held) and caller cancellation (OutcomeCanceled) are outcomes, not errors.
// Error messages become the span status description only with KeyRaw, since an error
// message may quote the lock key.
package telemetry
