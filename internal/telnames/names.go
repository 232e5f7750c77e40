// Package telnames holds the names lockkit's telemetry emits: span, event,
// attribute and metric names, the values of its enumerated attributes
// (Outcome, LostCause) and the metrics' units. The runtime records them
// (internal/obs); package telemetry publishes them, as data, in its Catalog,
// which docs/telemetry.md and the deploy/ rules are checked against.
package telnames

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Span name prefixes. A span's full name is the prefix, a space and the domain name
// ("lockkit.acquire table"), built once per domain; the key never appears in it.
const (
	// SpanHold covers a whole hold: acquire, the caller's function, renewals, release.
	SpanHold = "lockkit.hold"
	// SpanAcquire covers one acquisition, all of its attempts and backoffs.
	SpanAcquire = "lockkit.acquire"
	// SpanRenew covers one extend of a held lease.
	SpanRenew = "lockkit.renew"
	// SpanRelease covers the release of a lease.
	SpanRelease = "lockkit.release"
)

// Span event names.
const (
	// EventRetry is added to the acquire span before each backoff sleep.
	EventRetry = "lockkit.retry"
	// EventAcquireTimeout is added to the acquire span when it gave up because the
	// domain's max wait passed or the caller's ctx deadline did.
	EventAcquireTimeout = "lockkit.acquire.timeout"
	// EventAcquireExhausted is added to the acquire span when it gave up after the
	// domain's max attempts.
	EventAcquireExhausted = "lockkit.acquire.exhausted"
	// EventLeaseLost is added to the hold span when the lease is lost.
	EventLeaseLost = "lockkit.lease.lost"
	// EventBreakerChange is added to the span of the operation whose outcome
	// changed a circuit breaker's state (e.g. the acquire that tripped it).
	EventBreakerChange = "lockkit.breaker.change"
	// EventRedlockNode is added to a Redlock acquire span once per node and
	// attempt: what that node answered.
	EventRedlockNode = "lockkit.redlock.node"
	// EventWake is added to the acquire span of a FIFO waiter each time it
	// is woken: lockkit.wake.cause says by what.
	EventWake = "lockkit.wake"
)

// Attribute keys.
const (
	// AttrDomain is the lock domain's name ("table"); on every span and metric.
	AttrDomain = attribute.Key("lockkit.domain")
	// AttrKey is the full lock key, hashed or omitted per the KeyMode (lockkit.WithKeyMode). Spans only.
	AttrKey = attribute.Key("lockkit.key")
	// AttrKind is a domain's kind, election or semaphore, on every span and
	// metric of such a domain (a lock's carry none).
	AttrKind = attribute.Key("lockkit.kind")
	// AttrFence is the lease's fencing number, on acquire and hold spans of fencing domains, and on an election term's link to the previous term.
	AttrFence = attribute.Key("lockkit.fence")
	// AttrAttempts is the number of attempts an acquisition made.
	AttrAttempts = attribute.Key("lockkit.attempts")
	// AttrAcquireWait is the time an acquisition took, attempts and backoffs, in seconds.
	AttrAcquireWait = attribute.Key("lockkit.acquire.wait")
	// AttrOutcome is how an operation ended: one of the Outcome values.
	AttrOutcome = attribute.Key("lockkit.outcome")
	// AttrRetryAttempt is the number (from 1) of the attempt that is being retried.
	AttrRetryAttempt = attribute.Key("lockkit.retry.attempt")
	// AttrRetryBackoff is the backoff chosen before the next attempt, in seconds.
	AttrRetryBackoff = attribute.Key("lockkit.retry.backoff")
	// AttrLostCause is why a lease was lost: one of the LostCause values.
	AttrLostCause = attribute.Key("lockkit.lost.cause")
	// AttrBreakerFrom and AttrBreakerTo are a breaker state change's states:
	// closed, half_open or open.
	AttrBreakerFrom = attribute.Key("lockkit.breaker.from")
	// AttrNodeResult is a Redlock node's answer to one acquire attempt.
	AttrNodeResult = attribute.Key("lockkit.node.result")
	// AttrNodeLatency is how long that answer took, in seconds.
	AttrNodeLatency = attribute.Key("lockkit.node.latency")
	AttrBreakerTo   = attribute.Key("lockkit.breaker.to")
	// AttrBreakerNode names the backend node a circuit breaker guards.
	AttrBreakerNode = attribute.Key("lockkit.breaker.node")
	// AttrBreakerState is a state of a circuit breaker (closed, half_open or
	// open) on the MetricBreakerState gauge, which reports 1 for the state a
	// node's breaker is in and 0 for the others, as OpenTelemetry's
	// conventions do for states (hw.status with hw.state).
	AttrBreakerState = attribute.Key("lockkit.breaker.state")
	// AttrQueuePosition is a FIFO waiter's place in its lock's queue as it
	// last saw it (1 is the head), on the acquire span.
	AttrQueuePosition = attribute.Key("lockkit.queue.position")
	// AttrWakeCause is what woke a FIFO waiter, on lockkit.wake events:
	// push, timer or subscribed.
	AttrWakeCause = attribute.Key("lockkit.wake.cause")
	// AttrErrorType is the semantic-conventions error.type, set on failed spans only:
	// the Outcome's name ("timeout", "unavailable", ...), or "_OTHER".
	AttrErrorType = semconv.ErrorTypeKey
)

// Metric names. Units follow UCUM as OpenTelemetry does: "s" for durations,
// "{thing}" annotations for counts.
const (
	// MetricAcquireDuration is a histogram (s) of acquisition time, by domain and outcome.
	MetricAcquireDuration = "lockkit.acquire.duration"
	// MetricAcquireAttempts is a histogram ({attempt}) of attempts per acquisition.
	MetricAcquireAttempts = "lockkit.acquire.attempts"
	// MetricAcquireContended counts acquisitions whose first attempt found the lock
	// held ({acquire}). Divided by the count of MetricAcquireDuration it is the
	// contention rate.
	MetricAcquireContended = "lockkit.acquire.contended"
	// MetricHoldDuration is a histogram (s) of the time leases were held, by domain and
	// how the hold ended.
	MetricHoldDuration = "lockkit.hold.duration"
	// MetricRenewals counts extends ({renewal}), by domain and outcome.
	MetricRenewals = "lockkit.renewals"
	// MetricLeasesLost counts leases lost while held ({lease}), by domain and cause.
	MetricLeasesLost = "lockkit.leases.lost"
	// MetricReleases counts releases ({release}), by domain and outcome.
	MetricReleases = "lockkit.releases"
	// MetricBreakerState is a gauge ({state}) of each backend node's circuit
	// breaker: one series per node and lockkit.breaker.state (closed,
	// half_open, open), 1 for the state the breaker is in and 0 for the
	// others, as OpenTelemetry's hw.status with hw.state. "Open" is
	// lockkit_breaker_status{lockkit_breaker_state="open"} == 1. (Until
	// scope version 0.2.0 it was lockkit.breaker.state, 0/1/2 by node.)
	MetricBreakerState = "lockkit.breaker.status"
)

// Units of the metrics.
const (
	UnitSeconds  = "s"
	UnitAttempt  = "{attempt}"
	UnitAcquire  = "{acquire}"
	UnitRenewal  = "{renewal}"
	UnitLease    = "{lease}"
	UnitRelease  = "{release}"
	UnitState    = "{state}"
	ErrorTypeAny = "_OTHER"
)

// Breaker states, numbered as breaker.State (and gobreaker's State). The
// MetricBreakerState gauge carries them as the AttrBreakerState attribute
// (closed, half_open, open), not as numbers.
const (
	BreakerClosed   = 0
	BreakerHalfOpen = 1
	BreakerOpen     = 2
)
