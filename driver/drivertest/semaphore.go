package drivertest

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/lockkit"
)

// Semaphores (kind: semaphore) are built on the seam: a permit is a lease
// on one of Permits slot keys. These subtests hold every backend to what a
// semaphore promises (docs/semantics.md#semaphores).

// semaphorePolicy is a semaphore of n permits whose waiters poll gently
// (every slot is a round trip) for up to patience.
func semaphorePolicy(n int) lockkit.Policy {
	return lockkit.Policy{TTL: longTTL, Renew: fastRenew, Kind: policy.KindSemaphore, Permits: n,
		Retry: lockkit.Retry{Attempts: 1 << 20, Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxWait: patience}}
}

func semaphoreOf(d *lockkit.Domain, id string) lockkit.Semaphore {
	return d.Key(len(id) + 3).Literal("id:").String(id).Semaphore()
}

// semaphoreAtMostN: N permits are N leases on distinct keys, from two
// clients; the next single attempt is ErrNotAcquired. Then holders from
// two clients take and give back permits concurrently, counted inside fn:
// never more than N at once.
func (s *suite) semaphoreAtMostN(t *testing.T) {
	const (
		n      = 3
		perCl  = 3
		rounds = 4
	)
	c1, c2 := s.client(t, lockkit.WithCommandTimeout(2*time.Second)), s.client(t, lockkit.WithCommandTimeout(2*time.Second))
	sems := []lockkit.Semaphore{semaphoreOf(s.domain(t, c1, semaphorePolicy(n)), "x"), semaphoreOf(s.domain(t, c2, semaphorePolicy(n)), "x")}

	keys := map[string]bool{}
	var held []*lockkit.Lease
	for i := range n {
		lease, err := sems[i%2].TryAcquire(ctxFor(t, patience))
		if err != nil {
			t.Fatalf("%s: permit %d of %d: TryAcquire = %v", s.h.Name, i+1, n, err)
		}
		if keys[lease.Key()] {
			t.Fatalf("%s: permit %d has the key %q of a permit already held", s.h.Name, i+1, lease.Key())
		}
		keys[lease.Key()] = true
		held = append(held, lease)
	}
	for i, sem := range sems {
		if l, err := sem.TryAcquire(ctxFor(t, patience)); !errors.Is(err, lockkit.ErrNotAcquired) {
			t.Errorf("%s: client %d: permit %d of %d: TryAcquire = %q, %v; want ErrNotAcquired", s.h.Name, i+1, n+1, n, l.Key(), err)
		}
	}
	for _, l := range held {
		if err := l.Release(ctxFor(t, patience)); err != nil {
			t.Fatalf("%s: Release: %v", s.h.Name, err)
		}
	}

	var (
		ov   overlap
		wg   sync.WaitGroup
		errs = make(chan error, 2*perCl)
	)
	for _, sem := range sems {
		for range perCl {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if err := sem.Do(ctxFor(t, 2*patience), func(context.Context, *lockkit.Lease) error {
						defer ov.enter()()
						time.Sleep(10 * time.Millisecond)
						return nil
					}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("%s: Do: %v", s.h.Name, err)
	}
	if m := ov.max.Load(); m > n {
		t.Errorf("%s: %d permit holders were inside at once; the semaphore admits %d", s.h.Name, m, n)
	}
	t.Logf("%s: at most %d of %d permits held at once by %d holders", s.h.Name, ov.max.Load(), n, 2*perCl)
}

// semaphoreFreedPermit: with every permit held, a waiter (another client)
// waits; the permit given back reaches it, on the slot that was freed.
func (s *suite) semaphoreFreedPermit(t *testing.T) {
	const n = 2
	c1, c2 := s.client(t), s.client(t)
	sem := semaphoreOf(s.domain(t, c1, semaphorePolicy(n)), "w")
	var held []*lockkit.Lease
	for range n {
		lease, err := sem.TryAcquire(ctxFor(t, patience))
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", s.h.Name, err)
		}
		held = append(held, lease)
	}
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- semaphoreOf(s.domain(t, c2, semaphorePolicy(n)), "w").Do(ctxFor(t, patience), func(_ context.Context, lease *lockkit.Lease) error {
			got <- lease.Key()
			return nil
		})
	}()
	select {
	case k := <-got:
		t.Fatalf("%s: a waiter got permit %q while all %d were held", s.h.Name, k, n)
	case err := <-done:
		t.Fatalf("%s: the waiter returned while all permits were held: %v", s.h.Name, err)
	case <-time.After(100 * time.Millisecond):
	}
	freed := held[1].Key()
	if err := held[1].Release(ctxFor(t, patience)); err != nil {
		t.Fatalf("%s: Release: %v", s.h.Name, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%s: the waiter's Do after a permit was freed: %v", s.h.Name, err)
	}
	if k := <-got; k != freed {
		t.Errorf("%s: the waiter got permit %q; the freed one is %q and %q is still held", s.h.Name, k, freed, held[0].Key())
	}
	if err := held[0].Err(); err != nil {
		t.Errorf("%s: the permit still held: %v", s.h.Name, err)
	}
	_ = held[0].Release(ctxFor(t, patience)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
}

// semaphoreKilledHolder: a holder that died holding a permit (its slot
// taken on the backend directly with the harness's short TTL, never renewed
// nor released) keeps it until its TTL, less the drift, and no longer: a
// client whose every other permit is held gets that permit back then.
func (s *suite) semaphoreKilledHolder(t *testing.T) {
	const n = 2
	c, be := s.client(t), s.raw(t)
	sem := semaphoreOf(s.domain(t, c, semaphorePolicy(n)), "k")
	live, err := sem.TryAcquire(ctxFor(t, patience))
	if err != nil {
		t.Fatalf("%s: TryAcquire: %v", s.h.Name, err)
	}
	defer func() { _ = live.Release(ctxFor(t, patience)) }() //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
	dead := ""
	for i := range n {
		if k := policy.PermitKey(sem.Key(), i); k != live.Key() {
			dead = k
		}
	}
	ttl := s.h.TTL
	sent := time.Now()
	if _, err := be.Acquire(ctxFor(t, patience), &driver.Request{Key: dead, Token: rand.Text(), TTL: ttl}); err != nil {
		t.Fatalf("%s: taking permit %q directly: %v", s.h.Name, dead, err)
	}
	notBefore := sent.Add(ttl - policy.Drift(ttl))
	for {
		at := time.Now()
		lease, err := sem.TryAcquire(ctxFor(t, patience))
		if err == nil {
			if lease.Key() != dead {
				// The live permit's slot: free only if the live lease
				// was lost first (on a loaded machine it can miss its
				// renewals at the harness's short TTL), and then this is
				// no N+1. Two valid leases on one slot otherwise.
				lerr := live.Err()
				_ = lease.Release(ctxFor(t, patience)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
				if lerr == nil {
					t.Fatalf("%s: got permit %q while the live lease still holds it", s.h.Name, lease.Key())
				}
				t.Skipf("%s: the live permit was lost (%v) before the dead holder's TTL ran out: the history this test needs did not happen", s.h.Name, lerr)
			}
			// The grant came between at and now. Only one that certainly
			// came before the dead holder's deadline is an N+1: a try sent
			// just before it may be granted after it (on a loaded machine
			// a try sent at 985ms of a 1s TTL was, for the 988ms deadline).
			if got := time.Now(); got.Before(notBefore) {
				t.Fatalf("%s: a dead holder's permit came back %v after its acquire with TTL %v, before its deadline: N+1 permits", s.h.Name, got.Sub(sent), ttl)
			}
			t.Logf("%s: a dead holder's permit came back %v-%v after its acquire (TTL %v)", s.h.Name, at.Sub(sent).Round(time.Millisecond), time.Since(sent).Round(time.Millisecond), ttl)
			_ = lease.Release(ctxFor(t, patience)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
			return
		}
		if !errors.Is(err, lockkit.ErrNotAcquired) {
			t.Fatalf("%s: TryAcquire while the dead holder's permit expires: %v", s.h.Name, err)
		}
		if time.Since(sent) > ttl+patience {
			t.Fatalf("%s: a dead holder's permit is still held %v after its acquire (TTL %v)", s.h.Name, time.Since(sent), ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
