package lockkit

import (
	"context"
	"errors"
	"github.com/lockkit/lockkit/internal/errcheck"
	"github.com/lockkit/lockkit/internal/policy"
	"strconv"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// TestFIFOStallDuringFirstAttemptIsRetried: the server stalls (SIGSTOP)
// for 150ms during a FIFO Do's first attempt, past the 100ms command
// timeout. The wait goes on at the fallback interval with the same token
// and the Do succeeds; the failed attempt's error is never read as the ctx
// ending (which gave "stopped waiting …: %!w(<nil>)", matching no
// documented kind).
func TestFIFOStallDuringFirstAttemptIsRetried(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r, WithCommandTimeout(100*time.Millisecond))
	d := fifoDomain(t, c, fifoPolicy(2*time.Second, 10*time.Second))
	const rounds = 4
	for i := range rounds {
		l := lockOn(d, "stall")
		r.Pause(t)
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(150 * time.Millisecond)
			r.Resume(t)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ran := false
		err := l.Do(ctx, func(context.Context, *Lease) error { ran = true; return nil })
		cancel()
		<-resumed
		noNilWrap(t, err)
		if err != nil {
			t.Fatalf("round %d: Do after a 150ms stall = %v, want the wait to go on", i, err)
		}
		if !ran {
			t.Fatalf("round %d: fn did not run", i)
		}
	}
}

// noNilWrap fails t when an error's text shows a nil wrapped with %w.
func noNilWrap(t testing.TB, err error) {
	t.Helper()
	if err != nil && errcheck.Faulty(err.Error()) {
		t.Errorf("malformed error text: %q", err)
	}
}

// TestConcurrentClosesAgree: a client holds many leases from Acquire; two
// Closes run at once. The second waits for the first and returns what it
// returned: both nil, and no key of the client is left (a second Close
// that counted the leases the first was still releasing reported a false
// "N of M leases were not released … %!w(<nil>)").
func TestConcurrentClosesAgree(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	for round := range 5 {
		c := newClient(t, r)
		d := testDomain(t, c, Policy{TTL: 10 * time.Second})
		const n = 200
		var keys []string
		for i := range n {
			l := lockOn(d, "close-"+strconv.Itoa(round)+"-"+strconv.Itoa(i))
			if _, err := l.TryAcquire(t.Context()); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, l.Key())
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- c.Close(context.Background()) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				noNilWrap(t, err)
				t.Fatalf("round %d: concurrent Close = %v, want nil from both", round, err)
			}
		}
		if left := admin.Exists(context.Background(), keys...).Val(); left != 0 {
			t.Fatalf("round %d: %d keys still held after both Closes returned nil", round, left)
		}
	}
}

// TestLeaseSetFindsEveryBinding: the same domain bound twice on one
// client; DoAll(a, b, a') holds one lease for a's key, and LeaseSet finds
// it for a' as for a.
func TestLeaseSetFindsEveryBinding(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	p := Policy{TTL: 5 * time.Second, Fencing: true}
	d1, d2 := testDomain(t, c, p), testDomain(t, c, p)
	a, b, a2 := lockOn(d1, "a"), lockOn(d1, "b"), lockOn(d2, "a")
	err := DoAll(t.Context(), func(ctx context.Context, set *LeaseSet) error {
		if set.Lease(a) == nil || set.Lease(a2) != set.Lease(a) {
			t.Errorf("Lease(a) = %p, Lease(a') = %p: want the same lease", set.Lease(a), set.Lease(a2))
		}
		if f := set.Fence(a2); f == 0 || f != set.Fence(a) {
			t.Errorf("Fence(a') = %d, Fence(a) = %d", f, set.Fence(a))
		}
		return nil
	}, a, b, a2)
	if err != nil {
		t.Fatal(err)
	}
}

// TestCloseEndsEveryWait: a holder on one client; on another, a polling
// Do, a FIFO Do, a FIFO Acquire and a DoAll wait for held locks. Close on
// the waiting client ends every one of them promptly with ErrClosed (they
// went on for seconds, returning ErrNotAcquired, after a Close that had
// returned nil), and the FIFO waiters have left the queue, so a release
// hands the lock to no closed token.
func TestCloseEndsEveryWait(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	holderC := newClient(t, r)
	waiterC := newClient(t, r)
	poll := Policy{TTL: 10 * time.Second, Retry: Retry{Attempts: 1000, MaxWait: 20 * time.Second}}
	fp := fifoPolicy(10*time.Second, 20*time.Second)
	hp, hf := testDomain(t, holderC, poll), fifoDomain(t, holderC, fp)
	wp, wf := testDomain(t, waiterC, poll), fifoDomain(t, waiterC, fp)
	for _, l := range []Lock{lockOn(hp, "p"), lockOn(hf, "f1"), lockOn(hf, "f2"), lockOn(hp, "s")} {
		if _, err := l.TryAcquire(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noop := func(context.Context, *Lease) error { return nil }
	waits := map[string]func() error{
		"polling Do": func() error { return lockOn(wp, "p").Do(ctx, noop) },
		"FIFO Do":    func() error { return lockOn(wf, "f1").Do(ctx, noop) },
		"FIFO Acquire": func() error {
			_, err := lockOn(wf, "f2").Acquire(ctx)
			return err
		},
		"DoAll": func() error {
			return DoAll(ctx, func(context.Context, *LeaseSet) error { return nil }, lockOn(wp, "s"), lockOn(wp, "t"))
		},
	}
	type ended struct {
		name string
		err  error
		at   time.Time
	}
	out := make(chan ended, len(waits))
	for name, f := range waits {
		go func() { err := f(); out <- ended{name, err, time.Now()} }()
	}
	waitQueueLen(t, admin, lockOn(wf, "f1"), 1)
	waitQueueLen(t, admin, lockOn(wf, "f2"), 1)
	time.Sleep(200 * time.Millisecond) // every wait is under way
	closeStart := time.Now()
	if err := waiterC.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	closed := time.Now()
	for range waits {
		e := <-out
		noNilWrap(t, e.err)
		if !errors.Is(e.err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", e.name, e.err)
		}
		// Bound: one command timeout plus a margin for a loaded machine.
		if late := e.at.Sub(closed); late > policy.DefaultCommandTimeout+time.Second {
			t.Errorf("%s ended %v after Close returned", e.name, late)
		}
	}
	t.Logf("Close took %v", closed.Sub(closeStart))
	for _, k := range []string{"f1", "f2"} {
		if n := queueLen(t, admin, lockOn(wf, k)); n != 0 {
			t.Errorf("%s: %d closed waiters still queued", k, n)
		}
	}
}
