package telemetry

import "github.com/lockkit/lockkit/internal/telnames"

// ScopeName is the instrumentation scope of every tracer and meter lockkit creates:
// the module's import path, so a backend groups all of lockkit's telemetry under the
// library's name whichever package (runtime, breaker) records it.
const ScopeName = "github.com/lockkit/lockkit"

// Version is the instrumentation scope version. It changes whenever a name, unit or
// attribute in Catalog changes meaning, so dashboards can tell the schemas apart.
const Version = "0.2.0"

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
	breakerStates := []string{"closed", "half_open", "open"}
	outcomes := make([]string, telnames.NumOutcomes)
	for o := range telnames.NumOutcomes {
		outcomes[o] = o.String()
	}
	causes := make([]string, telnames.NumLostCauses)
	for c := range telnames.NumLostCauses {
		causes[c] = c.String()
	}
	return []Entry{
		{Kind: KindSpan, Name: telnames.SpanHold + " {domain}", Description: "The whole hold: acquire, the caller's function, renewals and release; the caller's spans nest under it."},
		{Kind: KindSpan, Name: telnames.SpanAcquire + " {domain}", Description: "One acquisition with all its attempts and backoffs; child of the hold span."},
		{Kind: KindSpan, Name: telnames.SpanRenew + " {domain}", Description: "One extend of a held lease; child of the hold span."},
		{Kind: KindSpan, Name: telnames.SpanRelease + " {domain}", Description: "The release of a lease; child of the hold span."},

		{Kind: KindEvent, Name: telnames.EventRetry, Description: "On the acquire span, before each backoff: lockkit.retry.attempt, lockkit.retry.backoff, lockkit.outcome of the failed attempt."},
		{Kind: KindEvent, Name: telnames.EventAcquireTimeout, Description: "On the acquire span when the max wait or the ctx deadline ended it: lockkit.attempts, lockkit.acquire.wait."},
		{Kind: KindEvent, Name: telnames.EventAcquireExhausted, Description: "On the acquire span when the max attempts ended it: lockkit.attempts, lockkit.acquire.wait."},
		{Kind: KindEvent, Name: telnames.EventLeaseLost, Description: "On the hold span when the lease is lost: lockkit.lost.cause."},
		{Kind: KindEvent, Name: telnames.EventRedlockNode, Description: "On a Redlock acquire span, one per node and attempt: lockkit.breaker.node (the node), lockkit.node.result, lockkit.node.latency, and error.type when it failed."},
		{Kind: KindEvent, Name: telnames.EventWake, Description: "On the acquire span of a FIFO waiter, each time it is woken: lockkit.wake.cause. The span links to the previous holder's hold span when that holder was traced."},
		{Kind: KindEvent, Name: telnames.EventBreakerChange, Description: "On the span of the operation that changed a circuit breaker's state: lockkit.breaker.node, lockkit.breaker.from, lockkit.breaker.to."},

		{Kind: KindAttribute, Name: string(telnames.AttrDomain), Type: "string", Description: "The lock domain's name; on every span and metric."},
		{Kind: KindAttribute, Name: string(telnames.AttrKey), Type: "string", Description: "The lock key, raw, hashed (hex of HMAC-SHA-256 or SHA-256, 32 digits) or omitted per the key mode (lockkit.WithKeyMode); spans only."},
		{Kind: KindAttribute, Name: string(telnames.AttrKind), Type: "string", Values: []string{"election", "semaphore"}, Description: "The domain's kind, on every span and metric of an election or semaphore domain (a lock's carry none): an election's acquire span is its campaign and its hold span its term, whose lockkit.fence is the term number; a semaphore's acquire, hold, release and lease.lost are a permit's."},
		{Kind: KindAttribute, Name: string(telnames.AttrFence), Type: "int", Description: "The fencing number of the lease, on acquire and hold spans of fencing domains; on an election term's link to the previous term, that term's number."},
		{Kind: KindAttribute, Name: string(telnames.AttrAttempts), Type: "int", Description: "Attempts the acquisition made, on the acquire span and its timeout/exhausted events."},
		{Kind: KindAttribute, Name: string(telnames.AttrAcquireWait), Type: "double", Description: "Time the acquisition took, in seconds, on the acquire span."},
		{Kind: KindAttribute, Name: string(telnames.AttrOutcome), Type: "string", Values: outcomes, Description: "How the operation ended, on every span and on the acquire, hold, renewal and release metrics."},
		{Kind: KindAttribute, Name: string(telnames.AttrRetryAttempt), Type: "int", Description: "The number (from 1) of the attempt being retried, on lockkit.retry events."},
		{Kind: KindAttribute, Name: string(telnames.AttrRetryBackoff), Type: "double", Description: "The backoff before the next attempt, in seconds, on lockkit.retry events."},
		{Kind: KindAttribute, Name: string(telnames.AttrLostCause), Type: "string", Values: causes, Description: "Why the lease was lost, on the lockkit.lease.lost event, the hold span and lockkit.leases.lost."},
		{Kind: KindAttribute, Name: string(telnames.AttrBreakerNode), Type: "string", Description: "A backend node: on lockkit.breaker.status (the node its breaker guards), lockkit.breaker.change and lockkit.redlock.node events."},
		{Kind: KindAttribute, Name: string(telnames.AttrNodeResult), Type: "string", Values: []string{"ok", "held", "failed", "breaker_open", "pending", "quarantined"}, Description: "A Redlock node's answer to an acquire attempt, on lockkit.redlock.node events."},
		{Kind: KindAttribute, Name: string(telnames.AttrNodeLatency), Type: "double", Description: "How long a Redlock node took to answer, in seconds (0 while pending), on lockkit.redlock.node events."},
		{Kind: KindAttribute, Name: string(telnames.AttrBreakerFrom), Type: "string", Values: breakerStates, Description: "The state a breaker left, on lockkit.breaker.change events."},
		{Kind: KindAttribute, Name: string(telnames.AttrBreakerTo), Type: "string", Values: breakerStates, Description: "The state a breaker entered, on lockkit.breaker.change events."},
		{Kind: KindAttribute, Name: string(telnames.AttrBreakerState), Type: "string", Values: breakerStates, Description: "A circuit breaker state, on lockkit.breaker.status: 1 for the state a node's breaker is in, 0 for the others."},
		{Kind: KindAttribute, Name: string(telnames.AttrQueuePosition), Type: "int", Description: "A FIFO waiter's place in the lock's queue as it last saw it (1 is the head), on the acquire span."},
		{Kind: KindAttribute, Name: string(telnames.AttrWakeCause), Type: "string", Values: []string{"push", "timer", "subscribed"}, Description: "What woke a FIFO waiter, on lockkit.wake events: a push, the fallback timer, or a (re)subscription."},
		{Kind: KindAttribute, Name: string(telnames.AttrErrorType), Type: "string", Description: "On failed spans only: the failure's outcome name, or _OTHER."},

		{Kind: KindMetric, Name: telnames.MetricAcquireDuration, Type: "histogram", Unit: telnames.UnitSeconds, Description: "Acquisition time, by lockkit.domain and lockkit.outcome."},
		{Kind: KindMetric, Name: telnames.MetricAcquireAttempts, Type: "histogram", Unit: telnames.UnitAttempt, Description: "Attempts per acquisition, by lockkit.domain and lockkit.outcome."},
		{Kind: KindMetric, Name: telnames.MetricAcquireContended, Type: "counter", Unit: telnames.UnitAcquire, Description: "Acquisitions whose first attempt found the lock held, by lockkit.domain and lockkit.outcome; over the count of lockkit.acquire.duration it is the contention rate."},
		{Kind: KindMetric, Name: telnames.MetricHoldDuration, Type: "histogram", Unit: telnames.UnitSeconds, Description: "Time from acquisition to the end of the hold, by lockkit.domain and lockkit.outcome (released, expired, lost, ...)."},
		{Kind: KindMetric, Name: telnames.MetricRenewals, Type: "counter", Unit: telnames.UnitRenewal, Description: "Extends, by lockkit.domain and lockkit.outcome (ok, or the failure)."},
		{Kind: KindMetric, Name: telnames.MetricLeasesLost, Type: "counter", Unit: telnames.UnitLease, Description: "Leases lost while held, by lockkit.domain and lockkit.lost.cause."},
		{Kind: KindMetric, Name: telnames.MetricReleases, Type: "counter", Unit: telnames.UnitRelease, Description: "Releases, by lockkit.domain and lockkit.outcome (released, expired = no longer held, or the failure)."},
		{Kind: KindMetric, Name: telnames.MetricBreakerState, Type: "gauge", Unit: telnames.UnitState, Description: "Circuit breaker state by lockkit.breaker.node and lockkit.breaker.state: 1 for the state the node's breaker is in (closed, half_open or open), 0 for the others."},
	}
}
