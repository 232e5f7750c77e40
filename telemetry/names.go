package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ScopeName is the instrumentation scope of every tracer and meter lockkit creates:
// the module's import path, so a backend groups all of lockkit's telemetry under the
// library's name whichever package (runtime, breaker) records it.
const ScopeName = "github.com/lockkit/lockkit"

// Version is the instrumentation scope version. It changes whenever a name, unit or
// attribute in Catalog changes meaning, so dashboards can tell the schemas apart.
const Version = "0.2.0"

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
	// AttrFence is the lease's fencing number, on acquire and hold spans of fencing domains.
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
	// conventions do for states (k8s.container.status.state, hw.state).
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
	unitSeconds  = "s"
	unitAttempt  = "{attempt}"
	unitAcquire  = "{acquire}"
	unitRenewal  = "{renewal}"
	unitLease    = "{lease}"
	unitRelease  = "{release}"
	unitState    = "{state}"
	errorTypeAny = "_OTHER"
)

// Breaker states, numbered as breaker.State (and gobreaker's State). The
// MetricBreakerState gauge carries them as the AttrBreakerState attribute
// (closed, half_open, open), not as numbers.
const (
	BreakerClosed   = 0
	BreakerHalfOpen = 1
	BreakerOpen     = 2
)

// Kind says what a catalog Entry names.
type Kind string

// The kinds of catalog entries.
const (
	KindSpan      Kind = "span"
	KindEvent     Kind = "event"
	KindAttribute Kind = "attribute"
	KindMetric    Kind = "metric"
)

// Entry is one name lockkit's telemetry emits.
type Entry struct {
	Kind Kind
	// Name is the span name pattern ("lockkit.acquire {domain}"), event name,
	// attribute key or metric name.
	Name string
	// Type is the attribute value type (string, int, double) or the metric
	// instrument (histogram, counter, gauge); empty for spans and events.
	Type string
	// Unit is the metric's unit; empty for the other kinds.
	Unit string
	// Values lists the allowed values of an enumerated attribute.
	Values []string
	// Description says what it means, in one sentence.
	Description string
}

// Catalog returns every span name pattern, event, attribute key and metric that
// lockkit emits, in a fixed order, for documentation and the tests that check it.
func Catalog() []Entry {
	outcomes := make([]string, numOutcomes)
	for o := range numOutcomes {
		outcomes[o] = o.String()
	}
	breakerStates := []string{"closed", "half_open", "open"}
	causes := make([]string, numLostCauses)
	for c := range numLostCauses {
		causes[c] = c.String()
	}
	return []Entry{
		{Kind: KindSpan, Name: SpanHold + " {domain}", Description: "The whole hold: acquire, the caller's function, renewals and release; the caller's spans nest under it."},
		{Kind: KindSpan, Name: SpanAcquire + " {domain}", Description: "One acquisition with all its attempts and backoffs; child of the hold span."},
		{Kind: KindSpan, Name: SpanRenew + " {domain}", Description: "One extend of a held lease; child of the hold span."},
		{Kind: KindSpan, Name: SpanRelease + " {domain}", Description: "The release of a lease; child of the hold span."},

		{Kind: KindEvent, Name: EventRetry, Description: "On the acquire span, before each backoff: lockkit.retry.attempt, lockkit.retry.backoff, lockkit.outcome of the failed attempt."},
		{Kind: KindEvent, Name: EventAcquireTimeout, Description: "On the acquire span when the max wait or the ctx deadline ended it: lockkit.attempts, lockkit.acquire.wait."},
		{Kind: KindEvent, Name: EventAcquireExhausted, Description: "On the acquire span when the max attempts ended it: lockkit.attempts, lockkit.acquire.wait."},
		{Kind: KindEvent, Name: EventLeaseLost, Description: "On the hold span when the lease is lost: lockkit.lost.cause."},
		{Kind: KindEvent, Name: EventRedlockNode, Description: "On a Redlock acquire span, one per node and attempt: lockkit.breaker.node (the node), lockkit.node.result, lockkit.node.latency, and error.type when it failed."},
		{Kind: KindEvent, Name: EventWake, Description: "On the acquire span of a FIFO waiter, each time it is woken: lockkit.wake.cause. The span links to the previous holder's hold span when that holder was traced."},
		{Kind: KindEvent, Name: EventBreakerChange, Description: "On the span of the operation that changed a circuit breaker's state: lockkit.breaker.node, lockkit.breaker.from, lockkit.breaker.to."},

		{Kind: KindAttribute, Name: string(AttrDomain), Type: "string", Description: "The lock domain's name; on every span and metric."},
		{Kind: KindAttribute, Name: string(AttrKey), Type: "string", Description: "The lock key, raw, hashed (hex of HMAC-SHA-256 or SHA-256, 32 digits) or omitted per the key mode (lockkit.WithKeyMode); spans only."},
		{Kind: KindAttribute, Name: string(AttrFence), Type: "int", Description: "The fencing number of the lease, on acquire and hold spans of fencing domains."},
		{Kind: KindAttribute, Name: string(AttrAttempts), Type: "int", Description: "Attempts the acquisition made, on the acquire span and its timeout/exhausted events."},
		{Kind: KindAttribute, Name: string(AttrAcquireWait), Type: "double", Description: "Time the acquisition took, in seconds, on the acquire span."},
		{Kind: KindAttribute, Name: string(AttrOutcome), Type: "string", Values: outcomes, Description: "How the operation ended, on every span and on the acquire, hold, renewal and release metrics."},
		{Kind: KindAttribute, Name: string(AttrRetryAttempt), Type: "int", Description: "The number (from 1) of the attempt being retried, on lockkit.retry events."},
		{Kind: KindAttribute, Name: string(AttrRetryBackoff), Type: "double", Description: "The backoff before the next attempt, in seconds, on lockkit.retry events."},
		{Kind: KindAttribute, Name: string(AttrLostCause), Type: "string", Values: causes, Description: "Why the lease was lost, on the lockkit.lease.lost event, the hold span and lockkit.leases.lost."},
		{Kind: KindAttribute, Name: string(AttrBreakerNode), Type: "string", Description: "A backend node: on lockkit.breaker.status (the node its breaker guards), lockkit.breaker.change and lockkit.redlock.node events."},
		{Kind: KindAttribute, Name: string(AttrNodeResult), Type: "string", Values: []string{"ok", "held", "failed", "breaker_open", "pending"}, Description: "A Redlock node's answer to an acquire attempt, on lockkit.redlock.node events."},
		{Kind: KindAttribute, Name: string(AttrNodeLatency), Type: "double", Description: "How long a Redlock node took to answer, in seconds (0 while pending), on lockkit.redlock.node events."},
		{Kind: KindAttribute, Name: string(AttrBreakerFrom), Type: "string", Values: breakerStates, Description: "The state a breaker left, on lockkit.breaker.change events."},
		{Kind: KindAttribute, Name: string(AttrBreakerTo), Type: "string", Values: breakerStates, Description: "The state a breaker entered, on lockkit.breaker.change events."},
		{Kind: KindAttribute, Name: string(AttrBreakerState), Type: "string", Values: breakerStates, Description: "A circuit breaker state, on lockkit.breaker.status: 1 for the state a node's breaker is in, 0 for the others."},
		{Kind: KindAttribute, Name: string(AttrQueuePosition), Type: "int", Description: "A FIFO waiter's place in the lock's queue as it last saw it (1 is the head), on the acquire span."},
		{Kind: KindAttribute, Name: string(AttrWakeCause), Type: "string", Values: []string{"push", "timer", "subscribed"}, Description: "What woke a FIFO waiter, on lockkit.wake events: a push, the fallback timer, or a (re)subscription."},
		{Kind: KindAttribute, Name: string(AttrErrorType), Type: "string", Description: "On failed spans only: the failure's outcome name, or _OTHER."},

		{Kind: KindMetric, Name: MetricAcquireDuration, Type: "histogram", Unit: unitSeconds, Description: "Acquisition time, by lockkit.domain and lockkit.outcome."},
		{Kind: KindMetric, Name: MetricAcquireAttempts, Type: "histogram", Unit: unitAttempt, Description: "Attempts per acquisition, by lockkit.domain and lockkit.outcome."},
		{Kind: KindMetric, Name: MetricAcquireContended, Type: "counter", Unit: unitAcquire, Description: "Acquisitions whose first attempt found the lock held, by lockkit.domain and lockkit.outcome; over the count of lockkit.acquire.duration it is the contention rate."},
		{Kind: KindMetric, Name: MetricHoldDuration, Type: "histogram", Unit: unitSeconds, Description: "Time from acquisition to the end of the hold, by lockkit.domain and lockkit.outcome (released, expired, lost, ...)."},
		{Kind: KindMetric, Name: MetricRenewals, Type: "counter", Unit: unitRenewal, Description: "Extends, by lockkit.domain and lockkit.outcome (ok, or the failure)."},
		{Kind: KindMetric, Name: MetricLeasesLost, Type: "counter", Unit: unitLease, Description: "Leases lost while held, by lockkit.domain and lockkit.lost.cause."},
		{Kind: KindMetric, Name: MetricReleases, Type: "counter", Unit: unitRelease, Description: "Releases, by lockkit.domain and lockkit.outcome (released, expired = no longer held, or the failure)."},
		{Kind: KindMetric, Name: MetricBreakerState, Type: "gauge", Unit: unitState, Description: "Circuit breaker state by lockkit.breaker.node and lockkit.breaker.state: 1 for the state the node's breaker is in (closed, half_open or open), 0 for the others."},
	}
}
