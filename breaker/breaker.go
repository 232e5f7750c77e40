package breaker

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Settings configures the breaker of each backend node. A zero field takes its documented
// default, so Settings{} is the default policy and a client option can
// change one field alone.
type Settings struct {
	// ConsecutiveFailures trips the circuit after this many failures in a
	// row in the closed state. Default 5. Set it to math.MaxUint32 to trip
	// on FailureRatio only.
	ConsecutiveFailures uint32

	// FailureRatio, when above 0, also trips the circuit once
	// failures/(failures+successes) reaches it, counted over at least
	// MinRequests such requests within the current Interval. Ignored
	// requests are not counted. Default 0: off. Values above 1 act as 1.
	FailureRatio float64

	// MinRequests is the least number of counted requests within Interval
	// before FailureRatio is considered. Default 20.
	MinRequests uint32

	// Interval is the cyclic period of the closed state after which its
	// counts are cleared. Default 10s.
	Interval time.Duration

	// OpenTimeout is how long the circuit stays open before it turns
	// half-open and lets probes through. Default 2s.
	OpenTimeout time.Duration

	// HalfOpenProbes is how many requests may be in flight while the
	// circuit is half-open; that many successes in a row close it, and one
	// failure opens it again. Default 1.
	HalfOpenProbes uint32

	// OnStateChange, if set, is called on every state change with the
	// breaker's name. It runs synchronously while the breaker's lock is
	// held: it must be quick and must not call back into lockkit.
	OnStateChange func(name string, from, to State)
}

// State is the state of a circuit.
type State uint8

const (
	// StateClosed lets every request through and counts failures.
	StateClosed State = iota
	// StateHalfOpen lets up to Settings.HalfOpenProbes requests through to
	// find out whether the backend has recovered.
	StateHalfOpen
	// StateOpen lets no request through until Settings.OpenTimeout passes.
	StateOpen
)

// String returns "closed", "half_open" or "open": the spelling of the
// lockkit.breaker.state, lockkit.breaker.from and lockkit.breaker.to
// attribute values (snake_case, as every value in telemetry.Catalog), of
// Client.Health and of the log lines.
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half_open"
	case StateOpen:
		return "open"
	default:
		return "State(" + strconv.Itoa(int(s)) + ")"
	}
}

// ErrOpen is matched, with errors.Is, by every error a breaker returns
// without sending the request because the circuit is open or its half-open probes
// are all in flight. The error itself is an [*OpenError].
var ErrOpen = errors.New("breaker: circuit open")

// OpenError is the error a breaker returns when it refuses a request.
// It unwraps to [ErrOpen].
type OpenError struct {
	// Name is the breaker's name: the backend node.
	Name string
	// State is StateOpen, or StateHalfOpen when every probe slot was taken.
	State State
	// Since is when the circuit last opened.
	Since time.Time
	// RetryAfter is how long until the circuit turns half-open; 0 when it
	// already is.
	RetryAfter time.Duration
}

// Error says which circuit refused the request, since when, and for how
// much longer.
func (e *OpenError) Error() string {
	if e == nil {
		return ErrOpen.Error()
	}
	ago := time.Since(e.Since).Round(time.Millisecond)
	if e.State == StateHalfOpen {
		return fmt.Sprintf("breaker: circuit for %q is half-open (opened %s ago) and all its probes are in flight", e.Name, ago)
	}
	return fmt.Sprintf("breaker: circuit for %q is open since %s (%s ago); next probe in %s",
		e.Name, e.Since.Format(time.RFC3339Nano), ago, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns [ErrOpen].
func (e *OpenError) Unwrap() error { return ErrOpen }
