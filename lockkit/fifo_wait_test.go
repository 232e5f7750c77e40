package lockkit

import (
	"context"
	"strconv"
	"strings"
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
	if err != nil && strings.Contains(err.Error(), "%!") {
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
