// Package backend is the seam between lockkit's Client and the stores that
// hold leases. A backend does one deployment's I/O and nothing else: take a
// key (issuing its fence, where it issues one), keep it alive, give it back,
// and answer a ping. Retry, circuit breakers, telemetry, lease tracking,
// renewal and local deadlines are applied once, by the Client, for every
// backend; a backend never sleeps, retries, logs or records telemetry.
//
// The vocabulary is shared: a held lock is ErrContended; anything else a
// backend returns is a failure of the backend (the Client reports it as
// lockkit.ErrUnavailable).
package driver

import (
	"context"
	"errors"
	"time"
)

// ErrContended is a backend's answer when the lock is held by another owner:
// an expected outcome, which the Client reports as lockkit.ErrNotAcquired.
var ErrContended = errors.New("lockkit: held")

// Request is one acquisition.
type Request struct {
	Key     string        // the full lock key, prefix included
	Token   string        // this lease's owner id: 128 random bits, text-encoded
	Holder  string        // a short description of the holder (host, pid, owner, trace id); may be ""
	TTL     time.Duration // how long the backend keeps the lock without a keep-alive; whole milliseconds
	Fencing bool          // issue a fence, strictly increasing per key, in the same step as the grant

	// Replicas, when > 0, asks a replicated backend to grant only once that
	// many replicas hold the lock, waiting at most ReplicaTimeout. Backends
	// without replicas ignore it.
	Replicas       int
	ReplicaTimeout time.Duration
}

// Backend is where leases live.
//
// Every method is bounded by ctx, which carries the Client's command
// deadline. Implementations are safe for concurrent use.
type Backend interface {
	// Acquire takes req.Key for req.Token. It returns the fence (0 when
	// req.Fencing is off), ErrContended when another owner holds the key,
	// or a backend error. After an error other than ErrContended the key
	// may or may not be held for req.Token: the Client releases it.
	Acquire(ctx context.Context, req *Request) (fence int64, err error)

	// Extend keeps key held for token for another ttl. held is false,
	// with a nil error, when the key no longer holds token: the lease is
	// lost. A backend whose locks live as long as a session does (no TTL
	// on the server) checks that session here.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (held bool, err error)

	// Release gives key back if it still holds token; held reports whether
	// it did. Nothing is changed when it does not.
	Release(ctx context.Context, key, token string) (held bool, err error)

	// Ping checks that the backend answers.
	Ping(ctx context.Context) error

	// Close frees what the backend holds of its own (sessions, goroutines).
	// It does not close the clients it was given.
	Close() error
}
