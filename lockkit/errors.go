package lockkit

import (
	"errors"
	"strconv"
)

// Sentinel errors. Errors returned by this package wrap one of them (with the
// domain, key and cause), so callers test with errors.Is.
//
// Contention and backend failure are never confused: a lock held by someone
// else is ErrNotAcquired; a backend that cannot answer is ErrUnavailable.
var (
	// ErrNotAcquired means the lock is held by someone else: after one attempt
	// (TryDo, TryAcquire) or after the domain's retry policy ran out of
	// attempts or wait time. It is an expected outcome, not a failure. The
	// error returned wraps it and names the key and the domain: test it
	// with errors.Is, not ==.
	ErrNotAcquired = errors.New("lockkit: lock not acquired: held by another owner")

	// ErrLockLost means a lease ended before it was released: an extend was
	// refused (the key expired or is held by someone else), or the lease's local
	// deadline passed without a successful extend (the backend unreachable, process
	// paused). Work protected by the lease must stop: fn's ctx is cancelled
	// with this error as its cause.
	ErrLockLost = errors.New("lockkit: lock lost")

	// ErrNotHeld means a release or extend found the key no longer holding this
	// lease's token (it expired, maybe someone else holds it now). Nothing was
	// changed in the store.
	ErrNotHeld = errors.New("lockkit: lock not held by this lease")

	// ErrUnavailable means the backend could not answer: network errors,
	// timeouts, server errors (Redis LOADING or READONLY, a PostgreSQL shutdown), or an open circuit
	// breaker. No lease is granted while the backend is uncertain.
	ErrUnavailable = errors.New("lockkit: backend unavailable")

	// ErrClosed is returned by every operation after Client.Close.
	ErrClosed = errors.New("lockkit: client closed")

	// ErrNoClient is returned by a Lock that is not bound to a client: the
	// zero Lock, or a generated package-level helper called before SetDefault.
	ErrNoClient = errors.New("lockkit: lock has no client: call the generated package's SetDefault(client), or use its New(client)")
)

// notAcquiredError is ErrNotAcquired from a single attempt, naming the lock.
// It is made only when an attempt finds the lock held: an acquisition that
// succeeds never builds one.
type notAcquiredError struct{ domain, key string }

func (e *notAcquiredError) Error() string {
	return "lockkit: lock not acquired: " + e.key + " (domain " + strconv.Quote(e.domain) + ") is held by another owner"
}

func (e *notAcquiredError) Unwrap() error { return ErrNotAcquired }

// Misuse: a nil fn or a nil ctx given to an operation.
var (
	errNilFn  = errors.New("fn is nil: pass the function to run under the lock")
	errNilCtx = errors.New("nil context: pass a context.Context (context.Background() if there is none)")
)
