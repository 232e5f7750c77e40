// Package fencing holds the cases of rule 5: the fn of a fencing lock's Do
// never reads the fence.
package fencing

import (
	"context"
	"fmt"

	"github.com/lockkit/lockkit/lockkit"
)

// TableLock is a lock of a fencing domain: the generator emits the marker.
type TableLock struct{ lockkit.Lock }

// LockkitFencing marks TableLock as a lock of a fencing domain.
func (TableLock) LockkitFencing() {}

// JobLock is a lock of a domain without fencing: no marker.
type JobLock struct{ lockkit.Lock }

// OddLock has a method of the marker's name but not its signature.
type OddLock struct{ lockkit.Lock }

func (OddLock) LockkitFencing() bool { return true }

func save(ctx context.Context, v string) error { return nil }

func saveFenced(ctx context.Context, v string, fence int64) error { return nil }

func book(ctx context.Context, lease *lockkit.Lease) error { return nil }

// --- reported ---

func unread(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error { // want `the fn of TableLock.Do never reads lease.Fence\(\): this lock's domain has fencing on`
		return save(ctx, "booked")
	})
}

func unnamed(ctx context.Context, l TableLock) error {
	return l.TryDo(ctx, func(ctx context.Context, _ *lockkit.Lease) error { // want `the fn of TableLock.TryDo never reads lease.Fence\(\)`
		return save(ctx, "booked")
	})
}

func onlyKey(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error { // want `never reads lease.Fence`
		if lease != nil {
			return save(ctx, lease.Key())
		}
		return nil
	})
}

// --- not reported ---

func reads(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return saveFenced(ctx, "booked", lease.Fence())
	})
}

func readsInClosure(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		write := func() error { return saveFenced(ctx, "booked", lease.Fence()) }
		return write()
	})
}

func passesLease(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return book(ctx, lease)
	})
}

func notFencing(ctx context.Context, l JobLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return save(ctx, "sent")
	})
}

func wrongMarker(ctx context.Context, l OddLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println(lease.Key())
		return save(ctx, "sent")
	})
}

// A named fn is not looked into.
func namedFn(ctx context.Context, l TableLock) error {
	return l.Do(ctx, book)
}

// A fn that calls nothing writes nowhere: a probe of contention, say.
func probe(ctx context.Context, l TableLock) error {
	n := 0
	return l.TryDo(ctx, func(context.Context, *lockkit.Lease) error {
		n = len([]int{int(int64(n))})
		return nil
	})
}

func onlyLeaseMethods(ctx context.Context, l TableLock) error {
	return l.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		return lease.Err()
	})
}
