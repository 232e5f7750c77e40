package lockkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Locker is a lock of any domain: a Lock, or a generated lock type, which
// embeds one. DoAll takes Lockers so that locks of different domains can be
// held together.
type Locker interface {
	lockkitLock() Lock
}

func (l Lock) lockkitLock() Lock { return l }

// ErrEmptySet is returned by DoAll and TryDoAll when no lock is given.
var ErrEmptySet = errors.New("lockkit: DoAll: no locks given")

// LeaseSet is what DoAll holds: one lease per distinct lock, in the set's
// canonical order. It is valid while every one of its leases is.
type LeaseSet struct {
	leases []*Lease
}

// Leases lists the leases in the set's canonical order (by key).
func (s *LeaseSet) Leases() []*Lease { return slices.Clone(s.leases) }

// Lease is the lease of l, which must be one of the locks given to DoAll;
// nil otherwise.
func (s *LeaseSet) Lease(l Locker) *Lease {
	k := l.lockkitLock()
	for _, lease := range s.leases {
		if lease.lock.d == k.d && lease.lock.key == k.key {
			return lease
		}
	}
	return nil
}

// Fence is the fencing number of l's lease: each fenced key has its own.
// 0 when l's domain does not fence, or l is not in the set.
func (s *LeaseSet) Fence(l Locker) int64 {
	if lease := s.Lease(l); lease != nil {
		return lease.Fence()
	}
	return 0
}

// Err is nil while every lease of the set is valid, and the first loss
// otherwise (matching ErrLockLost). Like Lease.Err it consults the clock.
func (s *LeaseSet) Err() error {
	for _, lease := range s.leases {
		if err := lease.Err(); err != nil {
			return err
		}
	}
	return nil
}

// DoAll holds every lock given, runs fn, and releases them all. The locks may
// belong to different domains, but to one client.
//
// Deadlock-free by construction: the locks are taken in one canonical order
// (by key), whatever order they are passed in, and one at a time with a
// single attempt each; when one is held by someone else, every lock already
// taken is given back before waiting, so no caller ever waits while holding.
// Retry and backoff apply to the whole set, per the policy of the set's first
// lock in canonical order. Duplicates collapse to one lock.
//
// fn's ctx is cancelled, with a cause matching ErrLockLost, when any lease of
// the set is lost; DoAll then returns an error matching ErrLockLost, as Do
// does (also when a lease passed its deadline unobserved, or a release found
// another owner). Close treats a running DoAll like a running Do: fn's ctx
// is cancelled with ErrClosed and the locks are released once fn returns.
func DoAll(ctx context.Context, fn func(ctx context.Context, set *LeaseSet) error, locks ...Locker) error {
	return doAll(ctx, true, fn, locks)
}

// TryDoAll is DoAll with a single attempt at the set: when any lock is held,
// it gives back what it took and returns ErrNotAcquired.
func TryDoAll(ctx context.Context, fn func(ctx context.Context, set *LeaseSet) error, locks ...Locker) error {
	return doAll(ctx, false, fn, locks)
}

func doAll(ctx context.Context, retry bool, fn func(context.Context, *LeaseSet) error, given []Locker) error {
	set, err := canonicalSet(given)
	if err != nil {
		return err
	}
	leases, fctxs, err := acquireAll(ctx, retry, set)
	if err != nil {
		return err
	}
	return runSet(ctx, leases, fctxs, fn)
}

// canonicalSet checks the locks and sorts them into the canonical order,
// without duplicates.
func canonicalSet(given []Locker) ([]Lock, error) {
	if len(given) == 0 {
		return nil, ErrEmptySet
	}
	set := make([]Lock, 0, len(given))
	var c *Client
	for i, g := range given {
		if g == nil {
			return nil, fmt.Errorf("lockkit: DoAll: lock %d is nil", i)
		}
		l := g.lockkitLock()
		switch {
		case l.d == nil:
			return nil, ErrNoClient
		case l.d.err != nil:
			return nil, l.d.err
		case c == nil:
			c = l.d.c
		case l.d.c != c:
			return nil, fmt.Errorf("lockkit: DoAll: %s and %s are on different clients; a set is held on one backend, or the order that keeps it deadlock-free would not hold", set[0].key, l.key)
		}
		set = append(set, l)
	}
	slices.SortFunc(set, func(a, b Lock) int { return cmp.Compare(a.key, b.key) })
	return slices.CompactFunc(set, func(a, b Lock) bool { return a.key == b.key }), nil
}

// acquireAll takes every lock in order, each with a single attempt, and gives
// back what it took when one fails; it retries the whole set per the first
// lock's policy when retry is set.
func acquireAll(ctx context.Context, retry bool, set []Lock) ([]*Lease, []context.Context, error) {
	p := &set[0].d.policy
	start := time.Now()
	sched := retrySchedule{r: &p.Retry, start: start}
	for attempts := 1; ; attempts++ {
		leases := make([]*Lease, 0, len(set))
		fctxs := make([]context.Context, 0, len(set))
		var err error
		for _, l := range set {
			var (
				lease *Lease
				fctx  context.Context
			)
			lease, fctx, err = l.acquire(ctx, false, true)
			if err != nil {
				break
			}
			leases, fctxs = append(leases, lease), append(fctxs, fctx)
		}
		if err == nil {
			return leases, fctxs, nil
		}
		giveBack(ctx, leases)
		retryable := errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable)
		if !retry || !retryable || p.Retry.MaxAttempts <= 1 || ctx.Err() != nil {
			return nil, nil, err
		}
		wait, _, ok := sched.next()
		if !ok {
			return nil, nil, fmt.Errorf("lockkit: DoAll: gave up after %d attempt(s) at the set in %v: %w", attempts, time.Since(start).Round(time.Millisecond), err)
		}
		if !sleepCtx(ctx, wait) {
			return nil, nil, fmt.Errorf("lockkit: DoAll: stopped waiting after %d attempt(s): %w", attempts, ctx.Err())
		}
	}
}

// giveBack releases leases taken for a set that could not be completed, in
// reverse order, and ends their Do-side bookkeeping (Close may wait on it).
func giveBack(ctx context.Context, leases []*Lease) {
	for i := len(leases) - 1; i >= 0; i-- {
		_ = leases[i].finishRun(ctx) // held only for an instant: a loss means nothing here
	}
}

// runSet runs fn under every lease: its ctx ends when any lease is lost or
// Close asks the set to finish. Then it releases them all and reports any
// loss, as Lease.run does for one.
func runSet(ctx context.Context, leases []*Lease, fctxs []context.Context, fn func(context.Context, *LeaseSet) error) (err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	var stops []func() bool
	for i, l := range leases {
		stops = append(stops,
			context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) }),
			// Close cancels the lease's fn ctx with ErrClosed.
			context.AfterFunc(fctxs[i], func() { cancel(context.Cause(fctxs[i])) }))
	}
	set := &LeaseSet{leases: leases}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
		var lost []error
		for _, l := range leases {
			if lostErr := l.finishRun(ctx); lostErr != nil {
				lost = append(lost, lostErr)
			}
		}
		if len(lost) > 0 {
			err = errors.Join(append(lost, err)...)
		}
	}()
	return fn(sctx, set)
}
