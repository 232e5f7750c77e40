package lockkit

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/errcheck"
	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/telnames"
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
func (s *LeaseSet) Leases() []*Lease {
	if s == nil {
		return nil
	}
	return slices.Clone(s.leases)
}

// Lease is the lease of l, which must be one of the locks given to DoAll;
// nil otherwise. A lock is found by its client and key, whichever binding
// of its domain made it: DoAll holds one lease per key.
func (s *LeaseSet) Lease(l Locker) *Lease {
	if s == nil || l == nil {
		return nil
	}
	k := l.lockkitLock()
	if k.d == nil {
		return nil
	}
	for _, lease := range s.leases {
		if lease.lock.d.c == k.d.c && lease.lock.key == k.key {
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
	if s == nil || len(s.leases) == 0 {
		return errNoLease
	}
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
// All or none, deadlock-free by construction. When the backend can take the
// whole set in one atomic step (Redis: every key on one server, a single
// node or Sentinel's master; on a Cluster, every key in one hash slot), one
// script takes all the keys or none (with one WAIT after it when a lock of
// the set waits for replicas). Otherwise (Cluster keys across slots,
// Redlock, PostgreSQL) the locks are taken
// in one canonical order (by key), whatever order they are passed in, and
// one at a time with a single attempt each; when one fails, every lock
// already taken is given back before waiting, so no caller ever waits while
// holding. Retry and backoff apply to the whole set, one attempt being one
// script or one pass, per the policy of the set's first lock in canonical
// order. Duplicates collapse to one lock.
//
// fn's ctx is cancelled, with a cause matching ErrLockLost, when any lease of
// the set is lost; DoAll then returns an error matching ErrLockLost, as Do
// does (also when a lease passed its deadline unobserved, or a release found
// another owner). Close treats a running DoAll like a running Do: fn's ctx
// is cancelled with ErrClosed and the locks are released once fn returns.
func DoAll(ctx context.Context, fn func(ctx context.Context, set *LeaseSet) error, locks ...Locker) error {
	return errcheck.Returned(doAll(ctx, true, fn, locks))
}

// TryDoAll is DoAll with a single attempt at the set: when any lock is held,
// it gives back what it took and returns ErrNotAcquired.
func TryDoAll(ctx context.Context, fn func(ctx context.Context, set *LeaseSet) error, locks ...Locker) error {
	return errcheck.Returned(doAll(ctx, false, fn, locks))
}

func doAll(ctx context.Context, retry bool, fn func(context.Context, *LeaseSet) error, given []Locker) error {
	if fn == nil {
		return fmt.Errorf("lockkit: DoAll: %w", errNilFn)
	}
	if ctx == nil {
		return fmt.Errorf("lockkit: DoAll: %w", errNilCtx)
	}
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
		case l.err != nil:
			return nil, l.err
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

// acquireAll takes the set, one attempt at a time, and retries the whole set
// per the first lock's policy when retry is set. An attempt is one atomic
// step when the backend can take the set in one (batcherFor), and otherwise
// every lock in order, each with a single attempt, what was taken given back
// when one fails.
//
// Telemetry records one acquisition per lock for the whole call, as Do
// does for one: a hold started here for each lock, deferred over the passes
// (what a pass takes and gives back is not a hold), a lockkit.retry event on
// each before every backoff, and the set's outcome, attempts and contention
// on each at the end.
func acquireAll(ctx context.Context, retry bool, set []Lock) ([]*Lease, []context.Context, error) {
	p := &set[0].d.policy
	batch := batcherFor(set)
	start := time.Now()
	sched := retrySchedule{r: &p.Retry, start: start}
	tel := startSetHolds(ctx, set)
	contended := false
	stopped := func(attempts int) ([]*Lease, []context.Context, error) {
		err := fmt.Errorf("lockkit: DoAll: stopped waiting after %d attempt(s): %w", attempts, ctx.Err())
		tel.settle(ctxOutcome(ctx), attempts, contended, nil, err)
		return nil, nil, err
	}
	for attempts := 1; ; attempts++ {
		var (
			leases []*Lease
			fctxs  []context.Context
			err    error
		)
		if batch != nil {
			leases, fctxs, err = attemptBatch(ctx, batch, set, tel)
		} else {
			leases, fctxs, err = attemptOneByOne(ctx, set, tel)
		}
		if err == nil {
			tel.settle(telnames.OutcomeAcquired, attempts, contended, leases, nil)
			return leases, fctxs, nil
		}
		if attempts == 1 && isContention(err) {
			contended = true
		}
		giveBack(ctx, leases)
		if !isContention(err) {
			settleCtx(ctx) // a failure at ctx's deadline is ctx's ending
		}
		if ctx.Err() != nil && err != ErrClosed {
			// ctx ended during the attempt: its error, as a single lock's
			// wait returns, not the contention the attempt found.
			return stopped(attempts)
		}
		retryable := errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable)
		if !retry || !retryable || !p.Retry.retries() {
			tel.settle(setOutcome(ctx, err, telnames.OutcomeContended), attempts, contended, nil, err)
			return nil, nil, err
		}
		wait, ended, ok := sched.next()
		if !ok {
			o := setOutcome(ctx, err, ended)
			err = fmt.Errorf("lockkit: DoAll: gave up after %d attempt(s) at the set in %v: %w", attempts, time.Since(start).Round(time.Millisecond), err)
			tel.settle(o, attempts, contended, nil, err)
			return nil, nil, err
		}
		tel.retry(attempts, wait, attemptOutcome(err, telnames.OutcomeContended))
		if !set[0].d.c.pause(ctx, wait) {
			if ctx.Err() == nil { // the client closed
				tel.settle(telnames.OutcomeClosed, attempts, contended, nil, ErrClosed)
				return nil, nil, ErrClosed
			}
			return stopped(attempts)
		}
	}
}

// setOutcome is the telemetry outcome of a set that was not taken: held is
// what contention means at this point (contended, exhausted or timeout).
func setOutcome(ctx context.Context, err error, held telnames.Outcome) telnames.Outcome {
	switch {
	case ctx.Err() != nil:
		return ctxOutcome(ctx)
	case err == ErrClosed:
		return telnames.OutcomeClosed
	}
	return attemptOutcome(err, held)
}

// setHolds is the telemetry of one DoAll call: per lock of the set, its
// hold (deferred until the set's outcome is known), the hold's ctx and its
// acquire span's ctx. With telemetry off the holds are nil.
type setHolds struct {
	hctxs, actxs []context.Context
	holds        []*obs.Hold
}

func startSetHolds(ctx context.Context, set []Lock) *setHolds {
	n := len(set)
	s := &setHolds{hctxs: make([]context.Context, n), actxs: make([]context.Context, n), holds: make([]*obs.Hold, n)}
	for i, l := range set {
		s.hctxs[i], s.holds[i] = l.d.tel.StartHold(ctx, l.key)
		s.actxs[i] = s.holds[i].StartAcquire(s.hctxs[i])
		s.holds[i].Defer()
	}
	return s
}

// retry adds a lockkit.retry event to every lock's acquire span.
func (s *setHolds) retry(attempt int, wait time.Duration, reason telnames.Outcome) {
	for _, h := range s.holds {
		h.Retry(attempt, wait, reason)
	}
}

// settle ends every lock's acquisition with the set's outcome; leases,
// when acquired, give each its fence.
func (s *setHolds) settle(o telnames.Outcome, attempts int, contended bool, leases []*Lease, err error) {
	for i, h := range s.holds {
		r := obs.AcquireResult{Outcome: o, Attempts: attempts, Contended: contended, Err: err}
		if i < len(leases) {
			r.Fence = leases[i].fence
		}
		h.Settle(r)
	}
}

// attemptOneByOne takes every lock in order, each with a single attempt, and
// stops at the first that fails: it returns what it took, for the caller to
// give back.
func attemptOneByOne(ctx context.Context, set []Lock, tel *setHolds) ([]*Lease, []context.Context, error) {
	leases := make([]*Lease, 0, len(set))
	fctxs := make([]context.Context, 0, len(set))
	for i, l := range set {
		if l.d.c.isClosed() {
			return leases, fctxs, ErrClosed
		}
		lease, fctx, err := l.acquireHeld(ctx, tel.hctxs[i], tel.actxs[i], tel.holds[i], l.d.c.be, false, true)
		if err != nil {
			return leases, fctxs, err
		}
		leases, fctxs = append(leases, lease), append(fctxs, fctx)
	}
	return leases, fctxs, nil
}

// batcherFor is the client's backend as a Batcher when it can take the whole
// set in one atomic step (one Redis server, or one Cluster slot); nil
// otherwise (keys across Cluster slots, Redlock, PostgreSQL), and when a lock
// of the set waits in FIFO order: its queue decides who may take it, and its
// release hands it over, which the one-step script knows nothing of.
func batcherFor(set []Lock) driver.Batcher {
	if len(set) < 2 {
		return nil
	}
	for _, l := range set {
		if l.d.policy.fifo() {
			return nil
		}
	}
	b, ok := set[0].d.c.be.(driver.Batcher)
	if !ok {
		return nil
	}
	keys := make([]string, len(set))
	for i, l := range set {
		keys[i] = l.key
	}
	if !b.CanBatch(keys) {
		return nil
	}
	return b
}

// attemptBatch makes one attempt at the whole set in one step: one script
// takes every key or none. Each lock gets its own token, fence and lease,
// under its hold of tel, as if taken by TryDo; the backend call runs under
// the first lock's acquire span. It returns the leases made before a
// failure, if any, for the caller to give back.
func attemptBatch(ctx context.Context, b driver.Batcher, set []Lock, tel *setHolds) ([]*Lease, []context.Context, error) {
	c := set[0].d.c
	// Every key counted until the step is done, its grants tracked or
	// given back: Close waits for it (see Lock.acquireHeld).
	for i, l := range set {
		if !c.beginAcquire(l.key) {
			for _, m := range set[:i] {
				c.endAcquire(m.key)
			}
			return nil, nil, ErrClosed
		}
	}
	defer func() {
		for _, l := range set {
			c.endAcquire(l.key)
		}
	}()
	n := len(set)
	reqs := make([]*driver.Request, n)
	for i, l := range set {
		p := &l.d.policy
		reqs[i] = &driver.Request{
			Key: l.key, Token: rand.Text(), Holder: c.holderOf(tel.hctxs[i]), TTL: p.TTL, Fencing: p.Fencing,
			Replicas: p.Replicas, ReplicaTimeout: p.ReplicaTimeout,
		}
	}
	sent := time.Now()
	fences, err := b.AcquireAll(tel.actxs[0], reqs)
	switch {
	case err == nil:
	case errors.Is(err, driver.ErrContended):
		return nil, nil, ErrNotAcquired
	case errors.Is(err, breaker.ErrOpen):
		// Refused before anything was sent: there is nothing to clean up.
		return nil, nil, fmt.Errorf("lockkit: acquire %s and %d more in one step: %w: %w", set[0].key, n-1, ErrUnavailable, err)
	case errors.Is(err, circuit.ErrData):
		// A fence counter the script cannot read: nothing was taken.
		return nil, nil, fmt.Errorf("lockkit: acquire %s and %d more in one step: %w", set[0].key, n-1, err)
	default:
		// The script may have run even though the reply was lost: give
		// back every token we may now hold, in the background and each on
		// its own (as attempt does).
		for i, l := range set {
			l.giveBackLater(ctx, c.be, reqs[i].Token)
		}
		return nil, nil, fmt.Errorf("lockkit: acquire %s and %d more in one step: %w: %w", set[0].key, n-1, ErrUnavailable, err)
	}
	leases := make([]*Lease, 0, n)
	fctxs := make([]context.Context, 0, n)
	for i, l := range set {
		lease, fctx, err := l.grant(ctx, tel.hctxs[i], tel.holds[i], c.be, granted{token: reqs[i].Token, fence: fences[i], sent: sent, attempts: 1}, true)
		if err != nil {
			// Too late to trust, or the client closed: grant gave back this
			// lock's key; give back the rest, and the caller the leases
			// already made.
			for j := i + 1; j < n; j++ {
				set[j].dropToken(ctx, c.be, reqs[j].Token)
			}
			return leases, fctxs, err
		}
		leases, fctxs = append(leases, lease), append(fctxs, fctx)
	}
	return leases, fctxs, nil
}

// giveBack releases leases taken for a set that could not be completed,
// and ends their Do-side bookkeeping (Close may wait on it).
func giveBack(ctx context.Context, leases []*Lease) {
	_ = finishAll(ctx, leases) // held only for an instant: a loss means nothing here
}

// finishAll ends the Do side of every lease (finishRun) and returns their
// losses. Each lease reads its own validity before any release is sent, and
// the releases go out in parallel, as Close's do: one after another, a
// stalled server held DoAll (and a Close waiting on it) a command timeout
// per key, 2s for ten keys at 200ms, and a lease checked after the earlier
// releases could be reported lost though it was valid when fn returned.
func finishAll(ctx context.Context, leases []*Lease) []error {
	switch len(leases) {
	case 0:
		return nil
	case 1:
		if err := leases[0].finishRun(ctx); err != nil {
			return []error{err}
		}
		return nil
	}
	lost := make([]error, len(leases))
	for i, l := range leases {
		l.fnCancel(nil)
		lost[i] = l.Err()
	}
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() { lost[i] = l.finishRunAfter(ctx, lost[i]) })
	}
	wg.Wait()
	var errs []error
	for _, err := range lost {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// runSet runs fn under every lease: its ctx ends when any lease is lost or
// Close asks the set to finish. Then it releases them all and reports any
// loss, as Lease.run does for one.
func runSet(ctx context.Context, leases []*Lease, fctxs []context.Context, fn func(context.Context, *LeaseSet) error) (err error) {
	sctx, cancel := context.WithCancelCause(ctx)
	var stops []func() bool
	for i, l := range leases {
		lctx := l.leaseCtx()
		stops = append(stops,
			context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) }),
			// Close cancels the lease's fn ctx with ErrClosed.
			context.AfterFunc(fctxs[i], func() { cancel(context.Cause(fctxs[i])) }))
	}
	set := &LeaseSet{leases: leases}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
		if lost := finishAll(ctx, leases); len(lost) > 0 {
			err = errors.Join(append(lost, err)...)
		}
	}()
	return fn(sctx, set)
}
