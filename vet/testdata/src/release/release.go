// Package release holds the cases of rule 4: a lease, or its fence, used
// after Release on the same path.
package release

import (
	"context"
	"fmt"

	"github.com/lockkit/lockkit/lockkit"
)

type TableLock struct{ lockkit.Lock }

func write(ctx context.Context, fence int64) error { return nil }

func keep(*lockkit.Lease) {}

// --- reported ---

func fenceAfter(ctx context.Context, lease *lockkit.Lease) error {
	if err := lease.Release(ctx); err != nil {
		return err
	}
	return write(ctx, lease.Fence()) // want `lease is used after lease.Release at line 21: the lease no longer protects anything`
}

func fenceVarAfter(ctx context.Context, lease *lockkit.Lease) error {
	fence := lease.Fence()
	if err := write(ctx, fence); err != nil {
		return err
	}
	if err := lease.Release(ctx); err != nil {
		return err
	}
	return write(ctx, fence) // want `the fence of lease is used after lease.Release at line 32: another holder may have the lock, and a newer fence, by now`
}

func twice(ctx context.Context, lease *lockkit.Lease) error {
	err := lease.Release(ctx)
	fmt.Println(err)
	return lease.Release(ctx) // want `lease is released again: it was released at line 39`
}

func passedAfter(ctx context.Context, lease *lockkit.Lease) error {
	err := lease.Release(ctx)
	keep(lease) // want `lease is used after lease.Release at line 45`
	return err
}

func onOnePath(ctx context.Context, lease *lockkit.Lease, early bool) error {
	if early {
		if err := lease.Release(ctx); err != nil {
			return err
		}
	}
	return write(ctx, lease.Fence()) // want `lease is used after lease.Release at line 52`
}

func insideDo(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		if err := lease.Release(ctx); err != nil {
			return err
		}
		return write(ctx, lease.Fence()) // want `lease is used after lease.Release at line 61`
	})
}

func inLoop(ctx context.Context, lease *lockkit.Lease, n int) {
	for i := 0; i < n; i++ {
		if err := lease.Release(ctx); err != nil { // want `lease is released again: it was released at line 70`
			fmt.Println(err)
		}
	}
}

// --- not reported ---

func identityAfter(ctx context.Context, lease *lockkit.Lease) error {
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("release %s (token %s): %w", lease.Key(), lease.Token(), err)
	}
	if lease != nil {
		fmt.Println("released")
	}
	return nil
}

func reacquired(ctx context.Context, l TableLock, lease *lockkit.Lease) error {
	if err := lease.Release(ctx); err != nil {
		return err
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer lease.Release(ctx)
	return write(ctx, lease.Fence())
}

func reassigned(ctx context.Context, l TableLock, lease *lockkit.Lease) error {
	var err error
	fmt.Println(err)
	for i := 0; i < 3; i++ {
		if err := lease.Release(ctx); err != nil {
			return err
		}
		if lease, err = l.Acquire(ctx); err != nil {
			return err
		}
		fmt.Println(lease.Fence())
	}
	return lease.Release(ctx)
}

func rangeLoop(ctx context.Context, leases []*lockkit.Lease) error {
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

func deferredRelease(ctx context.Context, lease *lockkit.Lease) error {
	defer lease.Release(ctx)
	return write(ctx, lease.Fence())
}

func otherBranch(ctx context.Context, lease *lockkit.Lease, done bool) error {
	if done {
		return lease.Release(ctx)
	}
	return write(ctx, lease.Fence())
}

// A Release in a function literal runs at another time: not followed.
func releasedInClosure(ctx context.Context, lease *lockkit.Lease) error {
	release := func() error { return lease.Release(ctx) }
	if err := write(ctx, lease.Fence()); err != nil {
		return err
	}
	return release()
}

func fenceBefore(ctx context.Context, lease *lockkit.Lease) error {
	fence := lease.Fence()
	if err := write(ctx, fence); err != nil {
		return err
	}
	return lease.Release(ctx)
}
