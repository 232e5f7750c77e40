package lockkit

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
)

// Stolen lock: A's lease expires, B acquires, A's late release returns
// ErrNotHeld and B's lock stays.
func TestStolenLock(t *testing.T) {
	r := testserver.StartRedis(t)
	policy := Policy{TTL: time.Second, Renew: -1}
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

// Renewal keeps a lease for over 3× its TTL while fn runs, CPU-bound too.
func TestRenewalOutlivesTTL(t *testing.T) {
	r := testserver.StartRedis(t)
	// 500ms, not shorter: the renewal is a goroutine beside fn's spinning
	// one, and a lease renewed every TTL/3 is lost when it waits for the
	// CPU past the rest of the TTL. At 300ms (200ms of slack) that
	// happened once while three test suites ran on two cores.
	const ttl = 500 * time.Millisecond
	// A 500ms TTL needs a command timeout that leaves renewals room.
	cto := WithCommandTimeout(150 * time.Millisecond)
	l := lockOn(testDomain(t, newClient(t, r, cto), Policy{TTL: ttl}), "long")
	other := lockOn(testDomain(t, newClient(t, r, cto), Policy{TTL: ttl}), "long")
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
