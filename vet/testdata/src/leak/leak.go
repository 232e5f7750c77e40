// Package leak holds the cases of rule 1: a lease not released on every
// path.
package leak

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockkit/lockkit/lockkit"
)

// TableLock is what the generator emits: Acquire is promoted from Lock.
type TableLock struct{ lockkit.Lock }

func work() error { return nil }

// --- reported ---

func neverReleased(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx) // want `the lease from TableLock.Acquire is not released on every path: the return at line 26 can be reached without lease.Release`
	if err != nil {
		return err
	}
	fmt.Println(lease.Fence())
	return work()
}

func earlyReturn(ctx context.Context, l TableLock) error {
	lease, err := l.TryAcquire(ctx) // want `the lease from TableLock.TryAcquire is not released on every path: the return at line 35`
	if err != nil {
		return err
	}
	if err := work(); err != nil {
		return err
	}
	return lease.Release(ctx)
}

// err no longer holds the acquisition's error once reassigned: the second
// err != nil branch does not mean the lease is nil.
func errReassigned(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx) // want `the return at line 49 can be reached`
	if err != nil {
		return err
	}
	err = work()
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

func secondAcquireFails(ctx context.Context, a, b TableLock) error {
	la, err := a.Acquire(ctx) // want `the lease from TableLock.Acquire is not released on every path: the return at line 61`
	if err != nil {
		return err
	}
	lb, err := b.Acquire(ctx)
	if err != nil {
		return err
	}
	defer lb.Release(ctx)
	return la.Release(ctx)
}

func blankLease(ctx context.Context, l TableLock) error {
	_, err := l.TryAcquire(ctx) // want `the lease from TableLock.TryAcquire is discarded: if the call succeeds, nothing releases it before the return at line 69`
	return err
}

// errors.Is being false says nothing about err being nil.
func blankLeaseWrongCheck(ctx context.Context, l TableLock) error {
	_, err := l.TryAcquire(ctx) // want `the lease from TableLock.TryAcquire is discarded`
	if errors.Is(err, lockkit.ErrNotAcquired) {
		return nil
	}
	return err
}

func reacquiredInLoop(ctx context.Context, l TableLock) {
	for i := 0; i < 3; i++ {
		lease, err := l.TryAcquire(ctx) // want `the next acquisition at line 83 can be reached without lease.Release`
		if err != nil {
			continue
		}
		fmt.Println(lease.Fence())
	}
}

func overwritten(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx) // want `the assignment to lease at line 97 can be reached`
	if err != nil {
		return err
	}
	fmt.Println(lease.Token(), lease.Deadline())
	lease = nil
	return nil
}

func fallsOffTheEnd(ctx context.Context, l lockkit.Lock) {
	lease, err := l.Acquire(ctx) // want `the lease from Lock.Acquire is not released on every path: the end of the function \(line 107\)`
	if err != nil {
		return
	}
	fmt.Println(lease.Key())
}

func inAClosure(ctx context.Context, l TableLock) {
	go func() {
		lease, err := l.Acquire(ctx) // want `not released on every path`
		if lease == nil || err != nil {
			return
		}
		_ = lease.Extend(ctx)
	}()
}

// --- not reported ---

func deferred(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	defer lease.Release(ctx)
	return work()
}

func everyPath(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	if err := work(); err != nil {
		return errors.Join(err, lease.Release(ctx))
	}
	return lease.Release(ctx)
}

func returned(ctx context.Context, l TableLock) (*lockkit.Lease, error) {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

func returnedDirectly(ctx context.Context, l TableLock) (*lockkit.Lease, error) {
	return l.TryAcquire(ctx)
}

func namedResult(ctx context.Context, l TableLock) (lease *lockkit.Lease, err error) {
	lease, err = l.Acquire(ctx)
	if err != nil {
		return
	}
	fmt.Println(lease.Fence())
	return
}

type holder struct{ lease *lockkit.Lease }

func storedInField(ctx context.Context, l TableLock, h *holder) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	h.lease = lease
	return nil
}

func acquiredIntoField(ctx context.Context, l TableLock, h *holder) (err error) {
	h.lease, err = l.Acquire(ctx)
	return err
}

func storedInStruct(ctx context.Context, l TableLock) (*holder, error) {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &holder{lease: lease}, nil
}

func keep(*lockkit.Lease) {}

func passedOn(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	keep(lease)
	return nil
}

func sent(ctx context.Context, l TableLock, ch chan<- *lockkit.Lease) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	ch <- lease
	return nil
}

func deferredClosure(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
			fmt.Println(err)
		}
	}()
	return work()
}

func errEqualsNil(ctx context.Context, l TableLock) error {
	if lease, err := l.TryAcquire(ctx); err == nil {
		defer lease.Release(ctx)
		return work()
	}
	return nil
}

func leaseIsNil(ctx context.Context, l TableLock) error {
	lease, err := l.TryAcquire(ctx)
	if lease == nil {
		return err
	}
	return lease.Release(ctx)
}

func tagless(ctx context.Context, l TableLock) error {
	lease, err := l.TryAcquire(ctx)
	switch {
	case errors.Is(err, lockkit.ErrNotAcquired):
		return nil
	case err != nil:
		return err
	}
	defer lease.Release(ctx)
	return work()
}

func blankLeaseExpectedFailure(ctx context.Context, l TableLock) error {
	if _, err := l.TryAcquire(ctx); !errors.Is(err, lockkit.ErrNotAcquired) {
		panic(fmt.Sprintf("want ErrNotAcquired, got %v", err))
	}
	return nil
}

func panics(ctx context.Context, l TableLock) error {
	lease, err := l.Acquire(ctx)
	if err != nil {
		return err
	}
	if lease.Fence() == 0 {
		panic("no fence")
	}
	return lease.Release(ctx)
}

func outerVariable(ctx context.Context, l TableLock) func() error {
	var lease *lockkit.Lease
	var err error
	func() {
		lease, err = l.Acquire(ctx) // the enclosing function owns lease
	}()
	return func() error {
		if err != nil {
			return err
		}
		return lease.Release(ctx)
	}
}

func ignored(ctx context.Context, l TableLock) {
	//lockkit-vet:ignore this demo simulates a crashed holder
	lease, err := l.Acquire(ctx)
	if err != nil {
		return
	}
	fmt.Println(lease.Key())
}

func ignoredWithoutReason(ctx context.Context, l TableLock) {
	//lockkit-vet:ignore
	lease, err := l.Acquire(ctx) // want `not released on every path`
	if err != nil {
		return
	}
	fmt.Println(lease.Key())
}

func taggedSwitch(ctx context.Context, l TableLock) error {
	lease, err := l.TryAcquire(ctx)
	switch err {
	case nil:
	case lockkit.ErrNotAcquired, lockkit.ErrLockLost:
		return nil
	default:
		return err
	}
	return lease.Release(ctx)
}

func sentinelCompare(ctx context.Context, l TableLock) error {
	if _, err := l.TryAcquire(ctx); err != lockkit.ErrNotAcquired {
		panic(err)
	}
	lease, err := l.TryAcquire(ctx)
	if lockkit.ErrNotAcquired == err {
		return nil
	}
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

// A local error variable may be nil: comparing with it says nothing.
func localCompare(ctx context.Context, l TableLock, other error) error {
	lease, err := l.TryAcquire(ctx) // want `the return at line 327 can be reached`
	if err == other {
		return nil
	}
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

func taggedSwitchLeaks(ctx context.Context, l TableLock) error {
	lease, err := l.TryAcquire(ctx) // want `the return at line 343 can be reached`
	switch err {
	case lockkit.ErrNotAcquired:
		return nil
	case nil:
		fmt.Println(lease.Fence())
	}
	return nil
}

// PartnerAPISemaphore is what the generator emits for a semaphore domain: a
// permit from Acquire is a lease like a lock's.
type PartnerAPISemaphore struct{ lockkit.Semaphore }

func permitNeverReleased(ctx context.Context, s PartnerAPISemaphore) error {
	permit, err := s.Acquire(ctx) // want `the lease from PartnerAPISemaphore.Acquire is not released on every path`
	if err != nil {
		return err
	}
	_ = permit.Key()
	return work()
}

func permitReleased(ctx context.Context, s PartnerAPISemaphore) error {
	permit, err := s.TryAcquire(ctx)
	if err != nil {
		return err
	}
	defer permit.Release(ctx)
	return work()
}
