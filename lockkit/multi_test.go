package lockkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

func transferPolicy() Policy {
	return Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 1 << 20, Initial: time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 1.5, MaxWait: 30 * time.Second}}
}

// Money moves between 3 accounts in random directions, 4 clients × 8
// goroutines, each transfer holding both accounts' locks (passed in either
// order). The total is conserved, no two sections on one account ever
// overlap, and the run finishes: no deadlock, bounded by its ctx.
func TestDoAllTransfersConserveTotal(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	const (
		clients, goroutines, perG = 4, 8, 64 // 2,048 transfers
		accounts, initial         = 3, 1000
	)
	balance := func(i int) string { return fmt.Sprintf("%s:balance:%d", t.Name(), i) }
	for i := range accounts {
		rdb.Set(t.Context(), balance(i), initial, 0)
	}
	probes := make([]overlap, accounts)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var (
		wg        sync.WaitGroup
		transfers atomic.Int64
		firstErr  atomic.Value
	)
	for range clients {
		d := testDomain(t, newClient(t, r), transferPolicy())
		for range goroutines {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			wg.Go(func() {
				for range perG {
					from := rng.IntN(accounts)
					to := (from + 1 + rng.IntN(accounts-1)) % accounts
					amount := 1 + rng.IntN(10)
					a, b := lockOn(d, strconv.Itoa(from)), lockOn(d, strconv.Itoa(to))
					if rng.IntN(2) == 0 {
						a, b = b, a // callers pass them in either order
					}
					err := DoAll(ctx, func(ctx context.Context, set *LeaseSet) error {
						leaveFrom, leaveTo := probes[from].enter(), probes[to].enter()
						defer leaveFrom()
						defer leaveTo()
						f, err1 := rdb.Get(ctx, balance(from)).Int()
						g, err2 := rdb.Get(ctx, balance(to)).Int()
						if err := errors.Join(err1, err2); err != nil {
							return err
						}
						time.Sleep(50 * time.Microsecond) // widen the window a race would need
						_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
							p.Set(ctx, balance(from), f-amount, 0)
							p.Set(ctx, balance(to), g+amount, 0)
							return nil
						})
						return err
					}, a, b)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					transfers.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatalf("a transfer failed: %v", err)
	}
	total := 0
	for i := range accounts {
		n, err := rdb.Get(t.Context(), balance(i)).Int()
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if m := probes[i].Max(); m != 1 {
			t.Fatalf("account %d: %d transfers were inside at once", i, m)
		}
	}
	if want := accounts * initial; total != want {
		t.Fatalf("total %d after %d transfers, want %d: a transfer ran without exclusion", total, transfers.Load(), want)
	}
	if n := transfers.Load(); n != clients*goroutines*perG {
		t.Fatalf("%d transfers, want %d", n, clients*goroutines*perG)
	}
}

// A set whose later key is held is rolled back: TryDoAll returns
// ErrNotAcquired and the earlier key is not left held; fn does not run.
func TestDoAllRollsBackPartialSet(t *testing.T) {
	r := testserver.StartRedis(t)
	d := testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second})
	other := testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second})
	a, b := lockOn(d, "a"), lockOn(d, "b") // "a" sorts first
	held, err := lockOn(other, "b").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(t.Context())
	ran := false
	err = TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { ran = true; return nil }, b, a)
	if !errors.Is(err, ErrNotAcquired) || ran {
		t.Fatalf("TryDoAll with its second key held = %v (fn ran: %v), want ErrNotAcquired", err, ran)
	}
	if n := r.Client(t).Exists(t.Context(), a.Key()).Val(); n != 0 {
		t.Fatal("the first key stayed held after the set was refused")
	}
	d.c.mu.Lock()
	tracked := len(d.c.leases)
	d.c.mu.Unlock()
	if tracked != 0 {
		t.Fatalf("the client tracks %d leases after a refused set", tracked)
	}
}

// The edges: an empty set, duplicates, a nil lock, and a set mixing clients.
func TestDoAllEdges(t *testing.T) {
	r := testserver.StartRedis(t)
	d := testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second, Fencing: true})
	noop := func(context.Context, *LeaseSet) error { return nil }
	if err := DoAll(t.Context(), noop); !errors.Is(err, ErrEmptySet) {
		t.Fatalf("DoAll() = %v, want ErrEmptySet", err)
	}
	a := lockOn(d, "a")
	var n int
	if err := DoAll(t.Context(), func(_ context.Context, s *LeaseSet) error { n = len(s.Leases()); return nil }, a, a, a); err != nil || n != 1 {
		t.Fatalf("DoAll(a, a, a) = %v with %d leases, want one", err, n)
	}
	if err := DoAll(t.Context(), noop, a, nil); err == nil || !strings.Contains(err.Error(), "lock 1 is nil") {
		t.Fatalf("DoAll with a nil lock = %v", err)
	}
	elsewhere := lockOn(testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second}), "b")
	if err := DoAll(t.Context(), noop, a, elsewhere); err == nil || !strings.Contains(err.Error(), "on different clients") {
		t.Fatalf("DoAll across clients = %v, want a refusal", err)
	}
	if err := DoAll(t.Context(), noop, a, Lock{}); !errors.Is(err, ErrNoClient) {
		t.Fatalf("DoAll with an unbound lock = %v, want ErrNoClient", err)
	}
	// Each fenced key has its own fence.
	b := lockOn(d, "b")
	err := DoAll(t.Context(), func(_ context.Context, s *LeaseSet) error {
		if s.Fence(a) <= 0 || s.Fence(b) <= 0 || s.Lease(a) == s.Lease(b) {
			return fmt.Errorf("fences %d and %d", s.Fence(a), s.Fence(b))
		}
		return nil
	}, a, b)
	if err != nil {
		t.Fatal(err)
	}
}

// One key of the set is taken by another owner while fn runs: the set is
// lost, fn's ctx says ErrLockLost once a renewal sees it, and DoAll reports it.
func TestDoAllLostWhenOneKeyIsLost(t *testing.T) {
	r := testserver.StartRedis(t)
	d := testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second, Renew: 30 * time.Millisecond})
	a, b := lockOn(d, "a"), lockOn(d, "b")
	rdb := r.Client(t)
	var cause error
	err := DoAll(t.Context(), func(ctx context.Context, s *LeaseSet) error {
		rdb.Set(ctx, b.Key(), "thief", time.Minute)
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(5 * time.Second):
		}
		return nil
	}, a, b)
	if !errors.Is(cause, ErrLockLost) {
		t.Fatalf("fn's ctx cause = %v, want ErrLockLost", cause)
	}
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("DoAll = %v, want ErrLockLost", err)
	}
	if rdb.Get(t.Context(), b.Key()).Val() != "thief" || rdb.Exists(t.Context(), a.Key()).Val() != 0 {
		t.Fatal("after the set was lost: the thief's key must stand and the other key be released")
	}
}

// Close during DoAll: fn's ctx says ErrClosed, every key stays held until fn
// returns, then all are released.
func TestCloseDuringDoAll(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	d := testDomain(t, c, Policy{TTL: 2 * time.Second})
	a, b := lockOn(d, "a"), lockOn(d, "b")
	rdb := r.Client(t)
	inFn := make(chan struct{})
	var cause error
	var heldDuring int64
	done := make(chan error, 1)
	go func() {
		done <- DoAll(context.Background(), func(ctx context.Context, _ *LeaseSet) error {
			close(inFn)
			<-ctx.Done()
			cause = context.Cause(ctx)
			time.Sleep(200 * time.Millisecond)
			heldDuring = rdb.Exists(context.Background(), a.Key(), b.Key()).Val()
			return nil
		}, a, b)
	}()
	<-inFn
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("DoAll = %v", err)
	}
	if !errors.Is(cause, ErrClosed) || heldDuring != 2 {
		t.Fatalf("cause %v, keys held while fn wound down %d; want ErrClosed and 2", cause, heldDuring)
	}
	if n := rdb.Exists(t.Context(), a.Key(), b.Key()).Val(); n != 0 {
		t.Fatal("keys left after Close")
	}
}

// On a Cluster, a set whose keys live in different slots (different masters)
// works; when the master of the later key stops answering, the earlier key
// is given back.
func TestDoAllAcrossClusterSlots(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	c := newClientOver(t, cc, WithCommandTimeout(200*time.Millisecond))
	d := testDomain(t, c, Policy{TTL: 5 * time.Second, Fencing: true})
	// Two keys on two different masters.
	var first, second Lock
	firstAddr := ""
	for i := 0; second.d == nil; i++ {
		l := lockOn(d, strconv.Itoa(i))
		m, err := cc.MasterForKey(t.Context(), l.Key())
		if err != nil {
			t.Fatal(err)
		}
		switch addr := m.Options().Addr; {
		case first.d == nil:
			first, firstAddr = l, addr
		case addr != firstAddr:
			second = l
		}
	}
	if first.Key() > second.Key() {
		first, second = second, first // first in canonical order
	}
	err := DoAll(t.Context(), func(_ context.Context, s *LeaseSet) error {
		if len(s.Leases()) != 2 || s.Fence(first) <= 0 || s.Fence(second) <= 0 {
			return fmt.Errorf("set %v", s.Leases())
		}
		return nil
	}, second, first)
	if err != nil {
		t.Fatalf("DoAll across slots: %v", err)
	}

	// The later key's master stops answering: the earlier one is given back.
	m, err := cc.MasterForKey(t.Context(), second.Key())
	if err != nil {
		t.Fatal(err)
	}
	var stopped *testserver.Redis
	for _, n := range cl.Nodes() {
		if n.Addr() == m.Options().Addr {
			stopped = n
		}
	}
	stopped.Pause(t)
	err = TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, first, second)
	stopped.Resume(t)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TryDoAll with a stopped master = %v, want ErrUnavailable", err)
	}
	if n := cc.Exists(t.Context(), first.Key()).Val(); n != 0 {
		t.Fatal("the earlier key stayed held after the set failed on a stopped master")
	}
}
