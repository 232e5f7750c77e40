package lockkit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
)

// Mutual exclusion: 4 clients (separate pools, like separate replicas) × 16
// goroutines run 2,048 critical sections, each a non-atomic read-modify-write
// of a Redis value. Any overlap loses an increment or shows in the in-section
// counter.
func TestMutualExclusion(t *testing.T) {
	r := testserver.StartRedis(t)
	const clients, goroutines, perG = 4, 16, 32
	policy := Policy{TTL: 2 * time.Second, Retry: Retry{Attempts: 1000, Initial: time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 2, Jitter: 0.5, MaxWait: 60 * time.Second}}
	counterKey := t.Name() + ":counter"
	var sections overlap
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for range clients {
		c := newClient(t, r)
		rdb := r.Client(t)
		l := lockOn(testDomain(t, c, policy), "shared")
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perG {
					err := l.Do(t.Context(), func(ctx context.Context, _ *Lease) error {
						defer sections.enter()()
						return incrNonAtomic(ctx, rdb, counterKey, 0)
					})
					if err != nil {
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
		t.Fatal(err)
	}
	got, err := r.Client(t).Get(t.Context(), counterKey).Int()
	if err != nil {
		t.Fatal(err)
	}
	if want := clients * goroutines * perG; got != want {
		t.Fatalf("counter = %d, want %d: critical sections overlapped", got, want)
	}
	if m := sections.Max(); m != 1 {
		t.Fatalf("%d goroutines were in the critical section at once", m)
	}
}

// Stolen lock: A's lease expires, B acquires, A's late release returns
// ErrNotHeld and B's lock stays.
func TestStolenLock(t *testing.T) {
	r := testserver.StartRedis(t)
	policy := Policy{TTL: 200 * time.Millisecond, Renew: -1}
	a := lockOn(testDomain(t, newClient(t, r), policy), "12")
	b := lockOn(testDomain(t, newClient(t, r), policy), "12")

	la, err := a.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	<-la.Done() // no renewal: lost at its deadline
	if !errors.Is(la.Err(), ErrLockLost) {
		t.Fatalf("A's lease: Err = %v, want ErrLockLost", la.Err())
	}
	waitGone(t, r, a.Key())
	lb, err := b.TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("B could not acquire after A expired: %v", err)
	}
	if err := la.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A's late release = %v, want ErrNotHeld", err)
	}
	if got, _ := r.Client(t).Get(t.Context(), b.Key()).Result(); !holder.Owns(got, lb.Token()) {
		t.Fatalf("after A's late release the key holds %q, want B's token %q", got, lb.Token())
	}
	if err := lb.Extend(t.Context()); err != nil {
		t.Fatalf("B's lease after A's late release: %v", err)
	}
	if err := la.Extend(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A's late extend = %v, want ErrNotHeld", err)
	}
	if err := lb.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Crash: a holder that never releases (its process died: no renewal, no
// release) blocks others only until the TTL.
func TestCrashedHolderFreedByTTL(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 300 * time.Millisecond
	// The crashed replica: it wrote the lock and died.
	crashedKey := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), Policy{TTL: ttl}), "7").Key()
	if err := r.Client(t).Set(t.Context(), crashedKey, "crashed-owner", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	l := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), Policy{TTL: ttl, Retry: Retry{Attempts: 100, Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1.5}}), "7")
	if _, err := l.TryAcquire(t.Context()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("while the crashed holder's key lives: %v, want ErrNotAcquired", err)
	}
	start := time.Now()
	ran := false
	if err := l.Do(t.Context(), func(context.Context, *Lease) error { ran = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("fn did not run")
	}
	t.Logf("acquired %v after the crashed holder's key was written (TTL %v)", time.Since(start).Round(time.Millisecond), ttl)
}

// Renewal keeps a lease for over 3× its TTL while fn runs, CPU-bound too.
func TestRenewalOutlivesTTL(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 300 * time.Millisecond
	// A 300ms TTL needs a command timeout that leaves renewals room.
	l := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), Policy{TTL: ttl}), "long")
	other := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), Policy{TTL: ttl}), "long")
	rdb := r.Client(t)
	err := l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		deadline := time.Now().Add(4 * ttl)
		var spins uint64
		for time.Now().Before(deadline) { // CPU-bound: no yielding calls
			spins++
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if _, err := other.TryAcquire(ctx); !errors.Is(err, ErrNotAcquired) {
			t.Errorf("another client acquired a renewed lock: %v", err)
		}
		if pttl := rdb.PTTL(ctx, lease.Key()).Val(); pttl <= 0 {
			t.Errorf("key TTL after 4×TTL of work = %v", pttl)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
}

// Lost lease: the server is paused while a lease is held; fn's ctx is
// cancelled with ErrLockLost no later than the deadline plus one renew
// interval, and Do returns ErrLockLost joined with fn's error.
func TestLostLeaseWhenRedisPaused(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 600 * time.Millisecond
	c := newClient(t, r, WithCommandTimeout(100*time.Millisecond))
	l := lockOn(testDomain(t, c, Policy{TTL: ttl}), "paused")
	var deadline, cancelledAt time.Time
	var cause error
	errFn := errors.New("fn stopped")
	err := l.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
		r.Pause(t)
		defer r.Resume(t)
		select {
		case <-ctx.Done():
			cancelledAt = time.Now()
			cause = context.Cause(ctx)
			deadline = lease.Deadline()
			return errFn
		case <-time.After(10 * ttl):
			return errors.New("fn's ctx was never cancelled")
		}
	})
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, errFn) {
		t.Fatalf("Do = %v, want ErrLockLost joined with fn's error", err)
	}
	if !errors.Is(cause, ErrLockLost) {
		t.Fatalf("context.Cause = %v, want ErrLockLost", cause)
	}
	renew := c.Domain(DomainSpec{Name: "x", Policy: Policy{TTL: ttl}}).Policy().Renew
	if late := cancelledAt.Sub(deadline); late > renew {
		t.Fatalf("fn's ctx was cancelled %v after the lease deadline, more than one renew interval (%v)", late, renew)
	}
	t.Logf("cancelled %v after the local deadline", cancelledAt.Sub(deadline))
}

// A ctx cancelled while waiting for a held lock ends the wait promptly with
// the ctx's error, not ErrNotAcquired.
func TestCtxEndsWait(t *testing.T) {
	r := testserver.StartRedis(t)
	policy := Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 1000, Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}}
	holder := lockOn(testDomain(t, newClient(t, r), policy), "busy")
	waiter := lockOn(testDomain(t, newClient(t, r), policy), "busy")
	lease, err := holder.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(t.Context())

	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = waiter.Acquire(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Acquire = %v, want DeadlineExceeded only", err)
	}
	ctx2, cancel2 := context.WithCancel(t.Context())
	time.AfterFunc(150*time.Millisecond, cancel2)
	err = waiter.Do(ctx2, func(context.Context, *Lease) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want Canceled", err)
	}
	// Promptly: well before the next backoff would have ended on its own.
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("waits took %v", el)
	}
}

// Retries that run out are ErrNotAcquired; TryDo contention is the bare
// ErrNotAcquired and fn does not run.
func TestContentionOutcomes(t *testing.T) {
	r := testserver.StartRedis(t)
	policy := Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 3, Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 2}}
	holder := lockOn(testDomain(t, newClient(t, r), policy), "busy")
	waiter := lockOn(testDomain(t, newClient(t, r), policy), "busy")
	lease, err := holder.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := waiter.TryDo(t.Context(), func(context.Context, *Lease) error { ran = true; return nil }); err != ErrNotAcquired || ran {
		t.Fatalf("TryDo = %v (ran %v), want bare ErrNotAcquired and fn not run", err, ran)
	}
	err = waiter.Do(t.Context(), func(context.Context, *Lease) error { ran = true; return nil })
	if !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) || ran {
		t.Fatalf("Do = %v (ran %v), want ErrNotAcquired after 3 attempts", err, ran)
	}
	if want := "gave up after 3 attempt(s)"; !contains(err, want) {
		t.Fatalf("Do = %v, want it to say %q", err, want)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release = %v, want ErrNotHeld", err)
	}
	if err := waiter.TryDo(t.Context(), func(context.Context, *Lease) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after release TryDo = %v (ran %v)", err, ran)
	}
}

// A dead backend is ErrUnavailable, never ErrNotAcquired.
func TestDeadBackendIsUnavailable(t *testing.T) {
	r := testserver.StartRedis(t)
	policy := Policy{TTL: time.Second, Retry: Retry{Attempts: 3, Initial: 10 * time.Millisecond}}
	l := lockOn(testDomain(t, newClient(t, r), policy), "x")
	r.Kill(t)
	for _, try := range []bool{false, true} {
		_, _, err := l.acquire(t.Context(), try, false)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotAcquired) {
			t.Fatalf("acquire(retry=%v) on a dead server = %v, want ErrUnavailable only", try, err)
		}
	}
	if err := newClient(t, r).Ping(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ping on a dead server = %v", err)
	}
}

// Scripts are sent by EVALSHA and fall back to EVAL after SCRIPT FLUSH.
func TestScriptFlushFallback(t *testing.T) {
	r := testserver.StartRedis(t)
	l := lockOn(testDomain(t, newClient(t, r), Policy{TTL: time.Second}), "x")
	for i := range 3 {
		if err := r.Client(t).ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("round %d: acquire after SCRIPT FLUSH: %v", i, err)
		}
		r.Client(t).ScriptFlush(t.Context())
		if err := lease.Release(t.Context()); err != nil {
			t.Fatalf("round %d: release after SCRIPT FLUSH: %v", i, err)
		}
	}
}

// Close releases every lease and stops renewals; afterwards ErrClosed.
func TestCloseReleasesEverything(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	d := testDomain(t, c, Policy{TTL: 10 * time.Second})
	var leases []*Lease
	for i := range 5 {
		lease, err := lockOn(d, strconv.Itoa(i)).TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	rdb := r.Client(t)
	for _, lease := range leases {
		if n := rdb.Exists(t.Context(), lease.Key()).Val(); n != 0 {
			t.Fatalf("%s still exists after Close", lease.Key())
		}
		select {
		case <-lease.Done():
		default:
			t.Fatal("lease not done after Close")
		}
	}
	if _, err := lockOn(d, "new").TryAcquire(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after Close = %v, want ErrClosed", err)
	}
}

// Tokens are 128-bit random values: unique across many acquisitions.
func TestTokensUnique(t *testing.T) {
	r := testserver.StartRedis(t)
	d := testDomain(t, newClient(t, r), Policy{TTL: time.Second})
	seen := map[string]bool{}
	for i := range 200 {
		lease, err := lockOn(d, strconv.Itoa(i)).TryAcquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if seen[lease.Token()] || len(lease.Token()) < 26 {
			t.Fatalf("token %q repeated or too short", lease.Token())
		}
		seen[lease.Token()] = true
		lease.Release(t.Context())
	}
}

func waitGone(t *testing.T, r *testserver.Redis, key string) {
	t.Helper()
	rdb := r.Client(t)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rdb.Exists(t.Context(), key).Val() == 0 {
			return
		}
	}
	t.Fatalf("%s did not expire", key)
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
