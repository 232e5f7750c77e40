// Package discard holds the cases of rule 3: a discarded error of Do,
// TryDo, Acquire, TryAcquire or Release.
package discard

import (
	"context"
	"fmt"

	"github.com/lockkit/lockkit/lockkit"
)

type JobLock struct{ lockkit.Lock }

func fn(ctx context.Context, lease *lockkit.Lease) error { return nil }

// --- reported ---

func statements(ctx context.Context, l JobLock, lease *lockkit.Lease) {
	l.Do(ctx, fn)                    // want `the error of JobLock.Do is discarded`
	l.TryDo(ctx, fn)                 // want `the error of JobLock.TryDo is discarded`
	lease.Release(ctx)               // want `the error of Lease.Release is discarded`
	go l.Do(ctx, fn)                 // want `the error of JobLock.Do is discarded`
	defer l.TryDo(ctx, fn)           // want `the error of deferred JobLock.TryDo is discarded`
	l.Acquire(ctx)                   // want `the result of JobLock.Acquire is discarded: the lease is never released, and the error is not checked`
	(l.TryAcquire(ctx))              // want `the result of JobLock.TryAcquire is discarded`
	lockkit.Lock.Do(l.Lock, ctx, fn) // want `the error of Lock.Do is discarded`
}

func blanks(ctx context.Context, l JobLock, lease *lockkit.Lease) {
	_ = l.Do(ctx, fn)         // want `the error of JobLock.Do is assigned to _`
	_ = lease.Release(ctx)    // want `the error of Lease.Release is assigned to _`
	var _ = l.TryDo(ctx, fn)  // want `the error of JobLock.TryDo is assigned to _`
	held, _ := l.Acquire(ctx) // want `the error of JobLock.Acquire is discarded: a failed acquisition returns a nil lease`
	defer held.Release(ctx)
	x, _ := 1, l.Do(ctx, fn) // want `the error of JobLock.Do is assigned to _`
	fmt.Println(x)
}

// --- not reported ---

// A deferred Release is the accepted idiom: the lease ends with the
// function, like Do's own release, and there is no one left to tell.
func deferredRelease(ctx context.Context, l JobLock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer lease.Release(ctx)
	return nil
}

func checked(ctx context.Context, l JobLock, lease *lockkit.Lease) error {
	if err := l.Do(ctx, fn); err != nil {
		return err
	}
	err := l.TryDo(ctx, fn)
	fmt.Println(err)
	lease.Fence() // not an error
	errs := []error{lease.Release(ctx), l.Do(ctx, fn)}
	fmt.Println(errs)
	return l.TryDo(ctx, fn)
}

// Lock is a look-alike of another package: not lockkit's.
type Lock struct{}

func (Lock) Do(ctx context.Context, fn func(context.Context, *lockkit.Lease) error) error {
	return nil
}

func (Lock) Release(ctx context.Context) error { return nil }

func lookAlike(ctx context.Context, l Lock) {
	l.Do(ctx, fn)
	l.Release(ctx)
	_ = l.Do(ctx, fn)
}
