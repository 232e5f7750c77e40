package breaker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Defaults for the zero fields of [Settings].
const (
	DefaultConsecutiveFailures uint32 = 5
	DefaultMinRequests         uint32 = 20
	DefaultInterval                   = 10 * time.Second
	DefaultOpenTimeout                = 2 * time.Second
	DefaultHalfOpenProbes      uint32 = 1
)

// Settings configures a [Breaker]. A zero field takes its documented
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
	// held: it must be quick and must not call the Breaker's methods.
	OnStateChange func(name string, from, to State)
}

// withDefaults returns s with its zero (or out-of-range) fields replaced by
// the defaults.
func (s Settings) withDefaults() Settings {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if !(s.FailureRatio > 0) { // also NaN
		s.FailureRatio = 0
	} else if s.FailureRatio > 1 {
		s.FailureRatio = 1
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Interval <= 0 {
		s.Interval = DefaultInterval
	}
	if s.OpenTimeout <= 0 {
		s.OpenTimeout = DefaultOpenTimeout
	}
	if s.HalfOpenProbes == 0 {
		s.HalfOpenProbes = DefaultHalfOpenProbes
	}
	return s
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

// String returns "closed", "half-open" or "open", suitable as a metric
// attribute.
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half-open"
	case StateOpen:
		return "open"
	default:
		return "State(" + strconv.Itoa(int(s)) + ")"
	}
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	case gobreaker.StateOpen:
		return StateOpen
	default:
		return StateClosed
	}
}

// ErrOpen is matched, with errors.Is, by every error [Breaker.Do] returns
// without running op because the circuit is open or its half-open probes
// are all in flight. The error itself is an [*OpenError].
var ErrOpen = errors.New("breaker: circuit open")

// OpenError is the error [Breaker.Do] returns when it refuses a request.
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
	ago := time.Since(e.Since).Round(time.Millisecond)
	if e.State == StateHalfOpen {
		return fmt.Sprintf("breaker: circuit for %q is half-open (opened %s ago) and all its probes are in flight", e.Name, ago)
	}
	return fmt.Sprintf("breaker: circuit for %q is open since %s (%s ago); next probe in %s",
		e.Name, e.Since.Format(time.RFC3339Nano), ago, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns [ErrOpen].
func (e *OpenError) Unwrap() error { return ErrOpen }

// Breaker is a circuit breaker for one backend node. It is safe for
// concurrent use.
type Breaker struct {
	cb       *gobreaker.CircuitBreaker[struct{}]
	settings Settings
	openedAt atomic.Pointer[time.Time] // when the circuit last opened; nil if never
}

// Verdicts handed to gobreaker in place of op's error. gobreaker's
// IsSuccessful and IsExcluded see only the error, but the classification
// also needs the caller's ctx, so Do classifies and passes these on.
var (
	verdictFailure = errors.New("breaker: backend failure")
	verdictIgnored = errors.New("breaker: ignored")
)

// New returns a closed breaker named name (the backend node's address, as
// the runtime keeps one breaker per node) with the policy s; zero fields
// of s take their defaults.
func New(name string, s Settings) *Breaker {
	s = s.withDefaults()
	b := &Breaker{settings: s}
	consecutive, ratio, minRequests := s.ConsecutiveFailures, s.FailureRatio, s.MinRequests
	onChange := s.OnStateChange
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: s.HalfOpenProbes,
		Interval:    s.Interval,
		Timeout:     s.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if c.ConsecutiveFailures >= consecutive {
				return true
			}
			if ratio == 0 {
				return false
			}
			counted := uint64(c.TotalSuccesses) + uint64(c.TotalFailures)
			return counted >= uint64(minRequests) &&
				float64(c.TotalFailures) >= ratio*float64(counted)
		},
		// Do hands gobreaker nil, verdictFailure or verdictIgnored. Anything
		// else is gobreaker's report of a panic in op, which says nothing
		// about the backend: excluded as well.
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return err != nil && err != verdictFailure },
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				now := time.Now()
				b.openedAt.Store(&now)
			}
			if onChange != nil {
				onChange(name, stateOf(from), stateOf(to))
			}
		},
	})
	return b
}

// Name returns the name the breaker was created with.
func (b *Breaker) Name() string { return b.cb.Name() }

// Settings returns the breaker's effective settings, defaults filled in.
func (b *Breaker) Settings() Settings { return b.settings }

// State returns the circuit's current state. An open circuit whose
// OpenTimeout has passed reports StateHalfOpen.
func (b *Breaker) State() State { return stateOf(b.cb.State()) }

// Do runs op(ctx) unless the circuit refuses it, records what op's error
// says about the backend (see [Classify], with ctx as the caller's ctx),
// and returns op's error unchanged: redis.Nil stays redis.Nil.
//
// When the circuit is open, or half-open with every probe slot taken, op
// is not called and Do returns an [*OpenError], which matches [ErrOpen].
//
// ctx must be the caller's own ctx; op may derive per-command timeouts
// from it, and their expiry then counts as a backend failure. A panic in
// op is not recorded either way and is re-raised.
func (b *Breaker) Do(ctx context.Context, op func(ctx context.Context) error) error {
	var opErr error
	_, err := b.cb.Execute(func() (struct{}, error) {
		opErr = op(ctx)
		switch Classify(opErr, ctx) {
		case Failure:
			return struct{}{}, verdictFailure
		case Ignored:
			return struct{}{}, verdictIgnored
		default:
			return struct{}{}, nil
		}
	})
	switch err {
	case nil, verdictFailure, verdictIgnored:
		return opErr
	case gobreaker.ErrOpenState:
		return b.openError(StateOpen)
	case gobreaker.ErrTooManyRequests:
		return b.openError(StateHalfOpen)
	default:
		// Not reached: Execute returns only the request's error or one of
		// the two refusals above.
		return err
	}
}

func (b *Breaker) openError(st State) error {
	e := &OpenError{Name: b.cb.Name(), State: st}
	if at := b.openedAt.Load(); at != nil {
		e.Since = *at
	}
	if st == StateOpen {
		e.RetryAfter = max(0, time.Until(e.Since.Add(b.settings.OpenTimeout)))
	}
	return e
}
