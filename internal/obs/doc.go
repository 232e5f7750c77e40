// Package obs records lockkit's OpenTelemetry spans and metrics: the protocol
// between the lock runtime and its instrumentation. The names it records are
// package telemetry's (the public catalog); this package is how the runtime
// records them, and applications never call it.
//
// It imports only the OpenTelemetry API and the standard library. The runtime
// drives it like this:
//
//	in, err := obs.New(obs.Options{})   // once per lockkit client
//	dom := in.Domain("table")           // once per lock domain
//
//	ctx, hold := dom.StartHold(ctx, key)     // Do / Acquire: the span over the whole hold
//	actx := hold.StartAcquire(ctx)           // child span; pass actx to the backend calls
//	hold.Retry(attempt, backoff, telnames.OutcomeContended) // before each backoff sleep
//	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeAcquired, ...})
//	... fn(ctx, lease) ...                   // ctx carries the hold span
//	rctx, r := hold.StartRenew(ctx)          // each extend
//	r.End(telnames.OutcomeOK, nil)
//	hold.Lost(telnames.LostRefused, err)    // when the lease is lost
//	rctx, rel := hold.StartRelease(ctx)
//	rel.End(telnames.OutcomeReleased, nil)
//	hold.End(telnames.OutcomeReleased, nil) // closes the hold span, records hold time
//
// # Cost when off
//
// With no provider configured (the global OpenTelemetry providers left at their
// defaults, or no-op providers passed in Options), Domain.StartHold returns a nil
// *Hold and the ctx unchanged, and every method of a nil *Hold, and of the zero
// Step, returns at once: no allocation, a few nanoseconds per call.
// When on, span attributes are built only for recording (sampled) spans, and each
// domain's metric attribute sets are built once, in Instruments.Domain.
package obs
