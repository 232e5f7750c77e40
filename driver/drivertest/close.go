package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/lockkit"
)

// closeEndsWaits: client A holds a key of a polling domain and, where the
// backend keeps a FIFO queue (FairQueue or ServerQueue), a key of a FIFO
// domain; client B waits for each with Do, and with a DoAll over a free
// key and a held one (it gives the free one back before each wait). B.Close
// ends every wait with ErrClosed, long before their max wait (which would
// end them with ErrNotAcquired), and returns nil: B holds nothing, so no
// key is left.
// When A then releases, a third client C takes each key with one attempt:
// no closed waiter was handed the lock, nor kept a place ahead of C.
func (s *suite) closeEndsWaits(t *testing.T) {
	cA, cB, cC := s.client(t), s.client(t), s.client(t)
	type wait struct {
		name     string
		a, b, c  lockkit.Lock
		free     []lockkit.Lock                  // C's locks on the keys B's DoAll took but A did not hold
		run      func(ctx context.Context) error // B's wait; nil: b.Do
		held     *lockkit.Lease
		done     chan error
		returned time.Time
	}
	poll := lockkit.Policy{TTL: longTTL, Renew: fastRenew, Retry: retry}
	domains := func(c *lockkit.Client) (p, f *lockkit.Domain) {
		p = s.domain(t, c, poll)
		if s.caps.FairQueue || s.caps.ServerQueue {
			fp := lockkit.Policy{TTL: longTTL, Renew: fastRenew, Wait: "fifo", Retry: lockkit.Retry{MaxWait: patience}}
			f = c.Domain(lockkit.DomainSpec{Name: "drivertest_fifo", Prefix: s.prefix(t) + "fifo:", Policy: fp})
			if err := f.Err(); err != nil {
				t.Fatalf("%s: FIFO domain: %v", s.h.Name, err)
			}
		}
		return p, f
	}
	pa, fa := domains(cA)
	pb, fb := domains(cB)
	pc, fc := domains(cC)
	waits := []*wait{{name: "polling Do", a: lockOf(pa, "p"), b: lockOf(pb, "p"), c: lockOf(pc, "p")}}
	all := &wait{name: "DoAll", a: lockOf(pa, "d"), b: lockOf(pb, "d"), c: lockOf(pc, "d"), free: []lockkit.Lock{lockOf(pc, "d0")}}
	all.run = func(ctx context.Context) error {
		return lockkit.DoAll(ctx, func(context.Context, *lockkit.LeaseSet) error {
			return errors.New("DoAll's fn ran while A held one of its locks")
		}, lockOf(pb, "d0"), all.b)
	}
	waits = append(waits, all)
	if fa != nil {
		waits = append(waits, &wait{name: "FIFO Do", a: lockOf(fa, "f"), b: lockOf(fb, "f"), c: lockOf(fc, "f")})
	} else {
		t.Logf("%s: no FIFO queue (FairQueue, ServerQueue false): the polling and DoAll waits only", s.h.Name)
	}
	for _, w := range waits {
		lease, err := w.a.TryAcquire(ctxFor(t, patience))
		if err != nil {
			t.Fatalf("%s: %s: A's TryAcquire: %v", s.h.Name, w.name, err)
		}
		w.held = lease
	}
	start := time.Now()
	for _, w := range waits {
		w.done = make(chan error, 1)
		run := w.run
		if run == nil {
			run = func(ctx context.Context) error {
				return w.b.Do(ctx, func(context.Context, *lockkit.Lease) error {
					return errors.New("fn ran while A held the lock")
				})
			}
		}
		go func() { w.done <- run(ctxFor(t, 2*patience)) }()
	}
	// Long enough for each wait to be under way (a FIFO waiter queued);
	// if one is not yet, Close still refuses it with ErrClosed.
	time.Sleep(500 * time.Millisecond)
	if err := cB.Close(ctxFor(t, patience)); err != nil {
		t.Errorf("%s: B.Close with only waits under way = %v; want nil (B holds no key)", s.h.Name, err)
	}
	for _, w := range waits {
		select {
		case err := <-w.done:
			w.returned = time.Now()
			if !errors.Is(err, lockkit.ErrClosed) || errors.Is(err, lockkit.ErrNotAcquired) || errors.Is(err, lockkit.ErrUnavailable) {
				t.Errorf("%s: B's %s after B.Close = %v; want ErrClosed alone", s.h.Name, w.name, err)
			}
		case <-time.After(patience - time.Since(start) + 5*time.Second):
			t.Fatalf("%s: B's %s did not return after B.Close, past its max wait %v", s.h.Name, w.name, patience)
		}
		if took := w.returned.Sub(start); took >= patience {
			t.Errorf("%s: B's %s returned %v after it began, not before its max wait %v", s.h.Name, w.name, took, patience)
		}
	}
	for _, w := range waits {
		if err := w.held.Release(ctxFor(t, patience)); err != nil {
			t.Fatalf("%s: %s: A's Release: %v", s.h.Name, w.name, err)
		}
		if err := w.c.TryDo(ctxFor(t, patience), nop); err != nil {
			t.Errorf("%s: %s: C's TryDo right after A released = %v; want the lock (was it handed to B's closed waiter?)", s.h.Name, w.name, err)
		}
		for _, l := range w.free {
			if err := l.TryDo(ctxFor(t, patience), nop); err != nil {
				t.Errorf("%s: %s: C's TryDo on %s, which B's closed DoAll took and gave back = %v; want the lock", s.h.Name, w.name, l.Key(), err)
			}
		}
	}
}
