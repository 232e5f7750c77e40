package zookeeper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/zookeeper"
)

// TestSingle runs the unit behaviour on one standalone ZooKeeper 3.8 server
// (one JVM for all of it: it takes seconds to start).
func TestSingle(t *testing.T) {
	z := startZK(t, 1)
	servers := z.Servers()
	raw := rawConn(t, servers)
	// sturdy is the client of the subtests that check what the backend
	// does and not how soon: a 2s command timeout and a 10s TTL, so that a
	// JVM held up past the default 500ms (rehearsals of round 23: fsync
	// stalls, a compile beside the suite) does not open the breaker or end
	// a lease the subtest relies on. The subtests that bound a time by the
	// TTL or the command timeout keep the defaults.
	sturdy := func(t *testing.T, at []string, zkOpts ...zookeeper.Option) *lockkit.Client {
		return newClientWith(t, at, zkOpts, lockkit.WithCommandTimeout(2*time.Second))
	}
	const sturdyTTL = 10 * time.Second

	// Mutual exclusion under 8 contenders with polling: never two inside
	// fn, fences strictly increasing in the order of the holds, and no node
	// left behind once everyone is done (contended attempts delete theirs).
	t.Run("Exclusion", func(t *testing.T) {
		c := sturdy(t, servers)
		p := lockkit.Policy{TTL: sturdyTTL, Retry: retry, Fencing: true}
		var (
			ov    overlap
			mu    sync.Mutex
			last  int64
			holds int
			wg    sync.WaitGroup
		)
		// The first acquire makes the lock's parent nodes (writes a cold
		// server under -race may take longer than the command timeout).
		if err := lockOf(c, "excl", p, "k").Do(ctxT(t, 60*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				for range 15 {
					err := lockOf(c, "excl", p, "k").Do(ctxT(t, 60*time.Second), func(ctx context.Context, l *lockkit.Lease) error {
						ov.enter()
						defer ov.exit()
						mu.Lock()
						if l.Fence() <= last {
							mu.Unlock()
							return fmt.Errorf("fence %d after %d", l.Fence(), last)
						}
						last = l.Fence()
						holds++
						mu.Unlock()
						time.Sleep(time.Millisecond)
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if m := ov.max.Load(); m != 1 {
			t.Fatalf("%d holders at once", m)
		}
		key := lockOf(c, "excl", p, "k").Key()
		if kids := nodes(t, raw, zookeeper.LockPath("/lockkit", key)); len(kids) != 0 {
			t.Fatalf("nodes left behind: %v", kids)
		}
		t.Logf("%d holds, last fence %#x", holds, last)
	})

	// A contended polling attempt answers ErrNotAcquired and deletes its
	// node: the holder's is the only one left.
	t.Run("ContendedLeavesNothing", func(t *testing.T) {
		c := sturdy(t, servers)
		p := lockkit.Policy{TTL: sturdyTTL}
		lk := lockOf(c, "cont", p, "k")
		l, err := lk.Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := lk.TryAcquire(ctxT(t, 10*time.Second)); !errors.Is(err, lockkit.ErrNotAcquired) {
				t.Fatalf("TryAcquire on a held lock: %v, want ErrNotAcquired", err)
			}
		}
		path := zookeeper.LockPath("/lockkit", lk.Key())
		if kids := nodes(t, raw, path); len(kids) != 1 || !strings.HasPrefix(kids[0], l.Token()) {
			t.Fatalf("nodes %v, want only the holder's (token %s)", kids, l.Token())
		}
		if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	// Release and extend are checked against the acquisition's own node: a
	// holder whose node was deleted behind its back (and the lock taken by
	// another) cannot extend or release the new holder's lock.
	t.Run("StaleReleaseExtend", func(t *testing.T) {
		c := sturdy(t, servers)
		p := lockkit.Policy{TTL: sturdyTTL, Renew: -1, Fencing: true}
		a, err := lockOf(c, "stale", p, "k").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		path := zookeeper.LockPath("/lockkit", a.Key())
		kids := nodes(t, raw, path)
		if len(kids) != 1 {
			t.Fatalf("nodes %v", kids)
		}
		if err := raw.Delete(path+"/"+kids[0], -1); err != nil {
			t.Fatal(err)
		}
		b, err := lockOf(c, "stale", p, "k").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if b.Fence() <= a.Fence() {
			t.Fatalf("fence %d after %d", b.Fence(), a.Fence())
		}
		if err := a.Extend(ctxT(t, 10*time.Second)); !errors.Is(err, lockkit.ErrNotHeld) {
			t.Fatalf("stale Extend: %v, want ErrNotHeld", err)
		}
		if err := a.Release(ctxT(t, 10*time.Second)); !errors.Is(err, lockkit.ErrNotHeld) {
			t.Fatalf("stale Release: %v, want ErrNotHeld", err)
		}
		if err := b.Extend(ctxT(t, 10*time.Second)); err != nil {
			t.Fatalf("the new holder's Extend after the stale calls: %v", err)
		}
		if kids := nodes(t, raw, path); len(kids) != 1 || !strings.HasPrefix(kids[0], b.Token()) {
			t.Fatalf("nodes %v, want b's", kids)
		}
		if err := b.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	// A lease that stops being extended while its process (and session)
	// lives on, and that nobody releases, frees its lock at its TTL, as on
	// Redis: the backend deletes the node itself.
	t.Run("UnrenewedLeaseFreed", func(t *testing.T) {
		c := newClient(t, servers)
		p := lockkit.Policy{TTL: time.Second, Renew: -1, Fencing: true}
		//lockkit-vet:ignore test: the lease is left to the fault under test or the client's Close
		a, err := lockOf(c, "unrenewed", p, "k").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		<-a.Done()
		start := time.Now()
		b, err := lockOf(newClient(t, servers), "unrenewed", lockkit.Policy{TTL: time.Second, Fencing: true, Retry: retry}, "k").Acquire(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("a lease lost on its holder's clock still blocks: %v", err)
		}
		t.Logf("granted %v after the first lease's deadline", time.Since(start))
		if b.Fence() <= a.Fence() {
			t.Fatalf("fence %d after %d", b.Fence(), a.Fence())
		}
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = b.Release(ctxT(t, 10*time.Second))
	})

	// A session that the server expires while the client is cut off (a
	// proxy that swallows everything): the holder's lease ends on its own
	// clock (fn's ctx cancelled with ErrLockLost) no later than the
	// session could have, another client then takes the lock with a
	// higher fence, and the cut-off client's node is gone.
	t.Run("SessionExpiry", func(t *testing.T) {
		px := startProxy(t, servers[0])
		c := newClient(t, []string{px.Addr()})
		other := newClient(t, servers)
		const ttl = time.Second
		p := lockkit.Policy{TTL: ttl, Fencing: true, Retry: retry}
		lk := lockOf(c, "exp", p, "k")
		got := make(chan error, 1)
		var fence int64
		var cut, lostAt time.Time
		go func() {
			got <- lk.Do(ctxT(t, 60*time.Second), func(ctx context.Context, l *lockkit.Lease) error {
				fence = l.Fence()
				cut = time.Now()
				px.blackhole.Store(true)
				<-ctx.Done()
				lostAt = time.Now()
				if !errors.Is(context.Cause(ctx), lockkit.ErrLockLost) {
					return fmt.Errorf("fn's ctx cause %v, want ErrLockLost", context.Cause(ctx))
				}
				return nil
			})
		}()
		var err error
		select {
		case err = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("Do did not return within 30s of the cut")
		}
		if !errors.Is(err, lockkit.ErrLockLost) {
			t.Fatalf("Do: %v, want ErrLockLost", err)
		}
		if d := lostAt.Sub(cut); d > ttl {
			t.Fatalf("fn's ctx cancelled %v after the cut, later than the TTL %v (the session timeout)", d, ttl)
		}
		l2, err := lockOf(other, "exp", p, "k").Acquire(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l2.Fence() <= fence {
			t.Fatalf("fence %d after %d", l2.Fence(), fence)
		}
		px.blackhole.Store(false)
		px.cut()
		if err := l2.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		// The cut-off client, back, gets a new session and the lock again.
		l3, err := lk.Acquire(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("acquire after the partition healed: %v", err)
		}
		//lockkit-vet:ignore test: the use after release is the point of this check
		if l3.Fence() <= l2.Fence() {
			t.Fatalf("fence %d after %d", l3.Fence(), l2.Fence())
		}
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = l3.Release(ctxT(t, 10*time.Second))
	})

	// FIFO: 16 waiters queued one after another get the lock in that order,
	// each holding it 1ms.
	t.Run("FIFO16", func(t *testing.T) {
		c := sturdy(t, servers)
		p := lockkit.Policy{TTL: sturdyTTL, Wait: "fifo", Retry: lockkit.Retry{Attempts: 2, MaxWait: 60 * time.Second}}
		lk := lockOf(c, "fifo", p, "k")
		first, err := lk.Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		path := zookeeper.LockPath("/lockkit", lk.Key())
		var (
			mu    sync.Mutex
			order []int
			ov    overlap
			wg    sync.WaitGroup
		)
		for i := range 16 {
			wg.Go(func() {
				err := lk.Do(ctxT(t, 60*time.Second), func(ctx context.Context, l *lockkit.Lease) error {
					ov.enter()
					defer ov.exit()
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(time.Millisecond)
					return nil
				})
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			})
			waitNodes(t, raw, path, i+2, 20*time.Second) // queued before the next one starts
		}
		if err := first.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, w := range order {
			if i != w {
				t.Fatalf("grant order %v, want 0..15", order)
			}
		}
		if len(order) != 16 || ov.max.Load() != 1 {
			t.Fatalf("%d grants, %d at once", len(order), ov.max.Load())
		}
		waitNodes(t, raw, path, 0, 10*time.Second)
	})

	// The parent's cversion, which names its sequential children, is a
	// signed 32-bit counter: past 2147483647 it wraps, and the names turn
	// negative (TOKEN--2147483648, ..., TOKEN--000000005, ...). A holder
	// whose node is named -5 (made by hand: no test makes two billion
	// children) blocks a polling attempt and a FIFO waiter, whose nodes the
	// server names 1 and 2, and is the holder ReadHolder reads. Before, the
	// name was read as no lock node at all, and both were granted while the
	// holder's lease was valid.
	t.Run("NegativeSeqHolder", func(t *testing.T) {
		negativeSeqHolder(t, servers, raw)
	})

	// A waiter follows its token's acquisition, not the first one it saw:
	// W is granted, gives the lock back, and queues again behind H2; H2's
	// release wakes it with a push. Before, the waiter kept the first
	// acquisition (granted: no predecessor), set no watch again, and each
	// later handover was noticed only by the fallback timer.
	t.Run("WaiterRequeued", func(t *testing.T) {
		waiterRequeued(t, servers)
	})

	// A watch whose GetW was lost with its connection is set again: the
	// next attempt finds the same predecessor, and its release wakes the
	// waiter with a push. Before, the waiter took that predecessor for
	// watched, and only the fallback timer woke it.
	t.Run("WaiterWatchLost", func(t *testing.T) {
		waiterWatchLost(t, servers)
	})

	// A domain whose TTL the ensemble cannot keep as a session timeout is
	// refused at New, naming the domain, the limit and the fix; a server
	// that grants a shorter timeout than declared fails the acquire, never
	// a silently shorter session.
	t.Run("TTLRefusal", func(t *testing.T) {
		c := newClient(t, servers)
		for _, ttl := range []time.Duration{100 * time.Millisecond, 30 * time.Second} {
			err := lockOf(c, "short", lockkit.Policy{TTL: ttl}, "k").Do(ctxT(t, 10*time.Second), func(context.Context, *lockkit.Lease) error { return nil })
			if err == nil || !strings.Contains(err.Error(), `domain "short"`) || !strings.Contains(err.Error(), "SessionTimeout") || !strings.Contains(err.Error(), "WithSessionTimeouts") {
				t.Fatalf("TTL %v: %v, want a refusal naming the domain, the limit and the fix", ttl, err)
			}
		}
		// Declared bounds wider than the server's (max 20s): the grant is
		// checked.
		wide, err := lockkit.New(zookeeper.New(servers, zookeeper.WithSessionTimeouts(200*time.Millisecond, time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		defer wide.Close(ctxT(t, 10*time.Second))
		start := time.Now()
		err = lockOf(wide, "long", lockkit.Policy{TTL: 30 * time.Second, Retry: retry}, "k").Do(ctxT(t, 20*time.Second), func(context.Context, *lockkit.Lease) error {
			t.Error("granted on a session shorter than the TTL")
			return nil
		})
		if !errors.Is(err, lockkit.ErrUnavailable) || !strings.Contains(err.Error(), "granted a session timeout of 20s") {
			t.Fatalf("TTL above the server's max: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("the refusal took %v: it must not be retried", d)
		}
	})

	// A create whose reply is lost (the proxy cuts the connection right
	// after forwarding it): the server made the node, the client never
	// heard. The acquire is retried and succeeds; the lost create's node is
	// found by its token and deleted, never left to block the lock.
	t.Run("LostCreateReply", func(t *testing.T) {
		lostCreate(t, servers[0], raw)
	})

	// A release whose delete, and the sweeper's first retry of it, are
	// swallowed by a short partition (shorter than the client's read
	// timeout: the session stays up, no state change follows). The
	// sweeper tries again by itself; before, nothing woke it, and the node
	// blocked the lock for as long as the process lived.
	t.Run("SweepAfterStall", func(t *testing.T) {
		sweepAfterStall(t, servers[0], raw)
	})

	// A chroot in the connection string: the nodes live below it.
	t.Run("Chroot", func(t *testing.T) {
		c := sturdy(t, []string{strings.Join(servers, ",") + "/app/x"})
		lk := lockOf(c, "chroot", lockkit.Policy{TTL: sturdyTTL}, "k")
		l, err := lk.Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if kids := nodes(t, raw, zookeeper.LockPath("/app/x/lockkit", lk.Key())); len(kids) != 1 {
			t.Fatalf("nodes below the chroot: %v", kids)
		}
		if kids := nodes(t, raw, zookeeper.LockPath("/lockkit", lk.Key())); len(kids) != 0 {
			t.Fatalf("nodes outside the chroot: %v", kids)
		}
		if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	// Digest auth: the lock's nodes carry an ACL under which another
	// identity reads who holds the lock but cannot delete it (nor queue).
	t.Run("ACL", func(t *testing.T) {
		c := sturdy(t, servers, zookeeper.WithDigestAuth("alice", "secret"), zookeeper.WithRoot("/secured"))
		lk := lockOf(c, "acl", lockkit.Policy{TTL: sturdyTTL}, "k")
		l, err := lk.Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		bob := rawConn(t, servers)
		if err := bob.AddAuth("digest", []byte("bob:other")); err != nil {
			t.Fatal(err)
		}
		path := zookeeper.LockPath("/secured", lk.Key())
		kids := nodes(t, bob, path)
		if len(kids) != 1 {
			t.Fatalf("bob lists %v", kids)
		}
		holder, _, err := bob.Get(path + "/" + kids[0])
		if err != nil || len(holder) == 0 {
			t.Fatalf("bob reads the holder: %q, %v", holder, err)
		}
		if err := bob.Delete(path+"/"+kids[0], -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("bob deletes the lock node: %v, want ErrNoAuth", err)
		}
		if _, err := bob.Create(path+"/x-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("bob queues on the lock: %v, want ErrNoAuth", err)
		}
		if err := l.Extend(ctxT(t, 10*time.Second)); err != nil {
			t.Fatalf("alice's lease after bob's tries: %v", err)
		}
		t.Logf("bob reads holder %q", holder)
		if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
}

// lostCreate: see TestSingle/LostCreateReply; target is the member the
// client reaches through the proxy, raw a connection to the ensemble.
func lostCreate(t *testing.T, target string, raw *zk.Conn) {
	px := startProxy(t, target)
	c := newClient(t, []string{px.Addr()}, undeclared)
	p := lockkit.Policy{TTL: 2 * time.Second, Fencing: true, Retry: retry}
	lk := lockOf(c, "lostcreate", p, "k")
	// A first acquire creates the parents (creates too).
	l, err := lk.Acquire(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	px.loseCreate.Store(true)
	l, err = lk.Acquire(ctxT(t, 60*time.Second))
	if err != nil {
		t.Fatalf("acquire after a lost create reply: %v", err)
	}
	if px.lost.Load() != 1 {
		t.Fatalf("the proxy lost %d creates, want 1", px.lost.Load())
	}
	path := zookeeper.LockPath("/lockkit", lk.Key())
	t.Logf("right after the grant: nodes %v (holder token %s)", nodes(t, raw, path), l.Token())
	// The lost create's node is deleted (by the sweeper when the release
	// of its token could not find it at once): only the holder's is left.
	kids := waitNodes(t, raw, path, 1, 20*time.Second)
	if !strings.HasPrefix(kids[0], l.Token()) {
		t.Fatalf("node %v is not the holder's (token %s)", kids, l.Token())
	}
	if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, raw, path, 0, 10*time.Second)
	other := newClient(t, []string{target}, undeclared)
	l2, err := lockOf(other, "lostcreate", p, "k").TryAcquire(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("a later acquire is blocked: %v", err)
	}
	//lockkit-vet:ignore test: the release outcome is not what this test checks
	_ = l2.Release(ctxT(t, 10*time.Second))
}

// sweepAfterStall: see TestSingle/SweepAfterStall.
func sweepAfterStall(t *testing.T, target string, raw *zk.Conn) {
	px := startProxy(t, target)
	// A 6s session: go-zookeeper's read timeout is 4s, well past the
	// partition, and the lockkit command timeout (500ms) well inside it.
	c := newClient(t, []string{px.Addr()})
	p := lockkit.Policy{TTL: 6 * time.Second}
	// A parameter the node path escapes ('/', '%'): the errors and log
	// lines name the key, which the key mode hides, never the path, which
	// it could not (a hashed run's log scan checks it).
	lk := lockOf(c, "sweepstall", p, "k/x%y")
	l, err := lk.Acquire(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	path := zookeeper.LockPath("/lockkit", lk.Key())
	waitNodes(t, raw, path, 1, 10*time.Second)
	px.blackhole.Store(true)
	relErr := l.Release(ctxT(t, 10*time.Second))
	// The sweeper's first try (kicked by the failed release) times out
	// inside the partition too.
	time.Sleep(1500 * time.Millisecond)
	px.blackhole.Store(false)
	if relErr == nil {
		t.Fatal("the release went through the partition; the test needs it to fail")
	}
	t.Logf("release in the partition: %v", relErr)
	if strings.Contains(relErr.Error(), path) {
		t.Errorf("the release error names the node path %s, which a key mode cannot hide; want the key", path)
	}
	waitNodes(t, raw, path, 0, 10*time.Second)
	other := newClient(t, []string{target})
	if err := lockOf(other, "sweepstall", p, "k/x%y").TryDo(ctxT(t, 10*time.Second), func(context.Context, *lockkit.Lease) error { return nil }); err != nil {
		t.Fatalf("a later acquire after the partition: %v", err)
	}
}
