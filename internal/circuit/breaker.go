package circuit

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/sony/gobreaker/v2"
)

// Defaults for the zero fields of breaker.Settings; its field docs state
// each one (TestSettingsDocDefaults).
const (
	DefaultConsecutiveFailures uint32 = 5
	DefaultMinRequests         uint32 = 20
	DefaultInterval                   = 10 * time.Second
	DefaultOpenTimeout                = 2 * time.Second
	DefaultHalfOpenProbes      uint32 = 1
)

// withDefaults returns s with its zero (or out-of-range) fields replaced by
// the defaults.
func withDefaults(s breaker.Settings) breaker.Settings {
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

func stateOf(s gobreaker.State) breaker.State {
	switch s {
	case gobreaker.StateHalfOpen:
		return breaker.StateHalfOpen
	case gobreaker.StateOpen:
		return breaker.StateOpen
	default:
		return breaker.StateClosed
	}
}

// Breaker is a circuit breaker for one backend node. It is safe for
// concurrent use.
type Breaker struct {
	cb       *gobreaker.CircuitBreaker[struct{}]
	settings breaker.Settings
	openedAt atomic.Pointer[time.Time] // when the circuit last opened; nil if never
	failure  atomic.Pointer[error]     // the last request error counted as a failure
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
func New(name string, s breaker.Settings) *Breaker {
	s = withDefaults(s)
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
func (b *Breaker) Settings() breaker.Settings { return b.settings }

// State returns the circuit's current state. An open circuit whose
// OpenTimeout has passed reports StateHalfOpen.
func (b *Breaker) State() breaker.State { return stateOf(b.cb.State()) }

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
	start := time.Now()
	monitor.enter()
	defer monitor.leave()
	_, err := b.cb.Execute(func() (struct{}, error) {
		opErr = op(ctx)
		switch Classify(opErr, ctx) {
		case Failure:
			if isTimeout(opErr) && starved(start) && b.cb.State() != gobreaker.StateHalfOpen {
				// This process was not running while it waited (lag.go):
				// not counted while closed. A half-open probe's timeout
				// counts regardless: ignored, it would free its slot for
				// the next request, so under a lasting starvation every
				// request would wait for the command timeout at a node
				// that may still be down, and the circuit would neither
				// close nor open again. (Still half-open at the end
				// means it was let in half-open: gobreaker drops the
				// result of a request let in under another state.)
				starvedTimeouts.Add(1)
				return struct{}{}, verdictIgnored
			}
			failure := opErr // a copy: &opErr would move opErr to the heap on every call
			b.failure.Store(&failure)
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
		return b.openError(breaker.StateOpen)
	case gobreaker.ErrTooManyRequests:
		return b.openError(breaker.StateHalfOpen)
	default:
		// Not reached: Execute returns only the request's error or one of
		// the two refusals above.
		return err
	}
}

// LastFailure is the last request error the breaker counted as a failure,
// or nil: while the circuit opens (in OnStateChange), the one that opened
// it or a concurrent one. The Client's log line names it as the cause.
func (b *Breaker) LastFailure() error {
	if p := b.failure.Load(); p != nil {
		return *p
	}
	return nil
}

func (b *Breaker) openError(st breaker.State) error {
	e := &breaker.OpenError{Name: b.cb.Name(), State: st}
	if at := b.openedAt.Load(); at != nil {
		e.Since = *at
	}
	if st == breaker.StateOpen {
		e.RetryAfter = max(0, time.Until(e.Since.Add(b.settings.OpenTimeout)))
	}
	return e
}
