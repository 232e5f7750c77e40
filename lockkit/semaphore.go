package lockkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockkit/lockkit/internal/errcheck"
	"github.com/lockkit/lockkit/internal/policy"
)

// Semaphore is one key of a semaphore domain (kind: semaphore): at most the
// domain's Permits holders at once. A permit is a Lease on one of Permits
// slots, each an ordinary lock key (the semaphore's key, then
// ":permit:<i>", in its Redis Cluster hash tag), so a permit has what a
// lock's lease has: renewal, loss reporting (fn's ctx cancelled with a
// cause matching ErrLockLost), the policy's fields, and a fence per slot (Lease.Key
// names the slot: a resource fences permit holders per Lease.Key). No
// two valid leases share a slot, so no more than Permits are valid at
// once, on every backend that passes driver/drivertest.
//
// Waiting polls: each attempt tries the slots, starting at a random one,
// and waits per the domain's retry policy while all are held. Under
// WaitFIFO the waiters queue first on the semaphore's own key (a lock,
// the gate, in the backend's queue); the gate's holder polls the slots
// until one is free, takes it and hands the gate on.
//
// Build one with KeyBuilder.Semaphore; the zero Semaphore returns
// ErrNoClient from every method.
type Semaphore struct {
	gate Lock // the semaphore's own key
}

// Semaphore finishes the key and returns the semaphore on it. A domain of
// another kind makes every method of the semaphore return an error.
func (b KeyBuilder) Semaphore() Semaphore {
	l := b.finish()
	if l.d != nil && l.err == nil && l.d.policy.Kind != policy.KindSemaphore {
		l.err = fmt.Errorf("lockkit: domain %q is kind %s, not %s: use its Lock", l.d.name, kindName(l.d.policy.Kind), policy.KindSemaphore)
	}
	return Semaphore{gate: l}
}

// kindName is kind as lockkit.yaml names it: "" is a lock.
func kindName(kind string) string {
	if kind == "" {
		return policy.KindLock
	}
	return kind
}

// Key is the semaphore's key (prefix included); its permits' keys
// (Lease.Key) are derived from it.
func (s Semaphore) Key() string { return s.gate.key }

// Do takes a permit, waiting per the domain's policy, runs fn, and gives
// the permit back, also when fn panics: Lock.Do's contract, for one permit.
func (s Semaphore) Do(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil && s.gate.d != nil {
		return fmt.Errorf("lockkit: Do %s: %w", s.gate.key, errNilFn)
	}
	lease, fctx, err := s.acquire(ctx, true, true)
	if err != nil {
		return err
	}
	return lease.run(fctx, fn)
}

// TryDo is Do with a single attempt: every permit held is ErrNotAcquired,
// and fn does not run.
func (s Semaphore) TryDo(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil && s.gate.d != nil {
		return fmt.Errorf("lockkit: TryDo %s: %w", s.gate.key, errNilFn)
	}
	lease, fctx, err := s.acquire(ctx, false, true)
	if err != nil {
		return err
	}
	return lease.run(fctx, fn)
}

// Acquire takes a permit, waiting per the domain's policy, and returns its
// lease, renewed in the background until Release.
func (s Semaphore) Acquire(ctx context.Context) (*Lease, error) {
	lease, _, err := s.acquire(ctx, true, false)
	return lease, err
}

// TryAcquire is Acquire with a single attempt.
func (s Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	lease, _, err := s.acquire(ctx, false, false)
	return lease, err
}

// acquire takes a permit: a lease on a free slot.
func (s Semaphore) acquire(ctx context.Context, retry, forDo bool) (lease *Lease, fctx context.Context, err error) {
	defer func() { err = errcheck.Returned(err) }()
	l := s.gate
	if err := l.usable(ctx); err != nil {
		return nil, ctx, err
	}
	d := l.d
	c, p := d.c, &d.policy
	// Counted, as Lock.acquireHeld counts its own: Close waits for it.
	if !c.beginAcquire(l.key) {
		return nil, ctx, ErrClosed
	}
	defer c.endAcquire(l.key)
	be := c.be
	start := time.Now()
	r := &p.Retry
	if p.fifo() {
		// Queue on the gate; its holder then polls the slots with the
		// backoff defaults, bounded by what is left of MaxWait (and ctx),
		// not by attempts: it is first in line. A single-attempt domain
		// (Attempts 1, which withDefaults makes of 0 without a MaxWait)
		// makes a single attempt at the slots too: with no MaxWait,
		// unbounded attempts would poll until ctx ended, holding the gate.
		gate, _, err := l.acquireOn(ctx, be, retry, false)
		if err != nil {
			return nil, ctx, err
		}
		defer gate.releaseGate(ctx)
		if r.retries() {
			fifo := *r
			fifo.Attempts = maxAttempts
			r = &fifo
		}
	}
	hctx, hold := d.tel.StartHold(ctx, l.key)
	actx := hold.StartAcquire(hctx)
	n := p.Permits
	return l.poll(ctx, hold, retry, r, start, func(attempts int, contended bool) (*Lease, context.Context, error) {
		first := rand.IntN(n)
		for i := range n {
			slot := Lock{d: d, key: policy.PermitKey(l.key, (first+i)%n)}
			lease, fctx, err := slot.try(ctx, hctx, actx, hold, be, attempts, contended, forDo)
			if err != ErrNotAcquired { //nolint:errorlint // the bare value: contention
				return lease, fctx, err
			}
		}
		return nil, ctx, ErrNotAcquired
	})
}

// maxAttempts stands for no bound on attempts.
const maxAttempts = 1 << 30

// releaseGate hands a semaphore's gate on to the next FIFO waiter. A
// release that fails leaves the gate to expire at its TTL: the next waiter
// waits longer, and no permit is affected.
func (l *Lease) releaseGate(ctx context.Context) {
	_ = l.Release(context.WithoutCancel(ctx))
}
