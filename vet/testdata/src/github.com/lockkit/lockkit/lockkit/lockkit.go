// Package lockkit is a stub of github.com/lockkit/lockkit/lockkit for the
// analyzer's tests: the names and signatures the analyzer matches.
// TestStubMatchesRuntime checks each of them against the real package.
package lockkit

import (
	"context"
	"errors"
	"time"
)

var (
	ErrNotAcquired = errors.New("lockkit: not acquired")
	ErrLockLost    = errors.New("lockkit: lock lost")
	ErrNotHeld     = errors.New("lockkit: not held")
)

type Lock struct{ key string }

func (l Lock) Key() string { return l.key }

func (l Lock) Do(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	return nil
}

func (l Lock) TryDo(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	return nil
}

func (l Lock) Acquire(ctx context.Context) (*Lease, error) { return nil, nil }

func (l Lock) TryAcquire(ctx context.Context) (*Lease, error) { return nil, nil }

type Semaphore struct{ key string }

func (s Semaphore) Key() string { return s.key }

func (s Semaphore) Do(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	return fn(ctx, nil)
}

func (s Semaphore) TryDo(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	return fn(ctx, nil)
}

func (s Semaphore) Acquire(ctx context.Context) (*Lease, error) { return nil, nil }

func (s Semaphore) TryAcquire(ctx context.Context) (*Lease, error) { return nil, nil }

type Election struct{ key string }

func (e Election) Key() string { return e.key }

func (e Election) Lead(ctx context.Context, fn func(ctx context.Context, term *Term) error) error {
	return fn(ctx, &Term{})
}

type Term struct{ lease *Lease }

func (t *Term) Number() int64 { return 0 }
func (t *Term) Lease() *Lease { return t.lease }
func (t *Term) Err() error    { return nil }

type Lease struct{ fence int64 }

func (l *Lease) Key() string                       { return "" }
func (l *Lease) Token() string                     { return "" }
func (l *Lease) Fence() int64                      { return l.fence }
func (l *Lease) Deadline() time.Time               { return time.Time{} }
func (l *Lease) Done() <-chan struct{}             { return nil }
func (l *Lease) Err() error                        { return nil }
func (l *Lease) Extend(ctx context.Context) error  { return nil }
func (l *Lease) Release(ctx context.Context) error { return nil }
