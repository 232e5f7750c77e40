package zookeeper_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/zookeeper"
)

// TestFollowerFailsAfterExtend: on an ensemble, the leader expires a session
// from what its followers report on its pings (every half tick), so a
// follower that fails right after answering a renewal takes that renewal's
// report with it. With the session timeout equal to the TTL, the leader then
// counted the session from an earlier request and freed the lock while the
// holder's lease was valid: B was granted with A's lease valid for another
// 336–592 ms (TTL 3 s, tick 100 ms; an attack review, 5 runs of 5). Now:
//
//   - Refused: an ensemble whose timing is not declared is refused, by New
//     when the servers are several, and at the first request when the one
//     server named is a member of an ensemble (/zookeeper/config); the
//     test-only undeclared option (internal/zkhook) is served, as before;
//   - Declared: the same history with WithEnsembleTiming: B is never granted
//     while A's lease is valid.
func TestFollowerFailsAfterExtend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member ZooKeeper ensemble")
	}
	z := startZK(t, 3)
	whole(t, z)

	t.Run("Refused", func(t *testing.T) {
		_, err := lockkit.New(zookeeper.New(z.Servers(), bounds))
		if err == nil || !strings.Contains(err.Error(), "WithEnsembleTiming") || !strings.Contains(err.Error(), "3 servers") {
			t.Fatalf("New on 3 servers, timing undeclared: %v, want a refusal naming WithEnsembleTiming", err)
		}
		// One member named: refused at the first request, not retried.
		c := newClient(t, z.Servers()[:1])
		start := time.Now()
		_, err = lockOf(c, "undeclared", lockkit.Policy{TTL: 2 * time.Second, Retry: retry}, "k").Acquire(ctxT(t, 20*time.Second))
		if err == nil || !strings.Contains(err.Error(), "WithEnsembleTiming") || !strings.Contains(err.Error(), "ensemble of 3 servers") {
			t.Fatalf("acquire on one member of 3, timing undeclared: %v, want a refusal naming WithEnsembleTiming", err)
		}
		if errors.Is(err, lockkit.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("acquire on one member of 3: %v after %v: retried until its ctx ended, want a final error", err, time.Since(start))
		}
		// The test-only option: served, as before.
		for _, servers := range [][]string{z.Servers()[:1], z.Servers()} {
			c := newClient(t, servers, undeclared)
			l, err := lockOf(c, "undeclared", lockkit.Policy{TTL: 2 * time.Second, Retry: retry}, "k").Acquire(ctxT(t, 20*time.Second))
			if err != nil {
				t.Fatalf("acquire with the undeclared timing on %d server(s): %v", len(servers), err)
			}
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			_ = l.Release(ctxT(t, 5*time.Second))
		}
	})

	t.Run("Declared", func(t *testing.T) {
		followerFailsAfterExtend(t, z, zookeeper.WithEnsembleTiming(z.TickTime, z.SyncLimit))
	})
}

// followerFailsAfterExtend: A's connection string names follower F only, so
// its session is on F. A holds a key in Do (TTL 3s, renew 700ms). Right after
// F answers an extend whose write came at least 450ms after A's write before
// it (so the leader's last report of A may be that much older), F is paused
// (SIGSTOP). B, on the leader, tries the key every 5 ms until the session
// timeout has surely passed. B must never be granted while A's lease is
// valid; when B is granted, A's fn has been told (ErrLockLost).
func followerFailsAfterExtend(t *testing.T, z *testserver.ZooKeeper, opts ...zookeeper.Option) {
	const (
		ttl   = 3 * time.Second
		renew = 700 * time.Millisecond
		gap   = 450 * time.Millisecond
	)
	leader := z.Leader(t, 20*time.Second)
	f := (leader + 1) % 3
	p := lockkit.Policy{TTL: ttl, Renew: renew}
	wl := &writeLog{}
	a := newClient(t, []string{z.Members[f].Addr()}, append(opts, zookeeper.WithDialer(wl.dial))...)
	b := newClient(t, []string{z.Members[leader].Addr()}, opts...)
	for _, c := range []*lockkit.Client{a, b} { // both sessions up first
		l, err := lockOf(c, "ffail-warm", p, "w").Acquire(ctxT(t, 20*time.Second))
		if err != nil {
			t.Fatalf("warm-up: %v", err)
		}
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = l.Release(ctxT(t, 5*time.Second))
	}

	held := make(chan *lockkit.Lease, 1)
	finish := make(chan struct{})
	done := make(chan error, 1)
	var (
		mu    sync.Mutex
		cause error
	)
	go func() {
		done <- lockOf(a, "ffail", p, "k").Do(ctxT(t, 60*time.Second), func(ctx context.Context, l *lockkit.Lease) error {
			held <- l
			select {
			case <-ctx.Done():
				mu.Lock()
				cause = context.Cause(ctx)
				mu.Unlock()
			case <-finish:
			}
			return nil
		})
	}()
	var lease *lockkit.Lease
	select {
	case lease = <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("A was not granted in 20s")
	}
	defer func() {
		close(finish)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("A's Do did not return 20s after fn was told to")
		}
	}()

	last := lease.Deadline()
	for limit := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Microsecond) {
		if time.Now().After(limit) {
			t.Skipf("no extend with %v before it in 20s (the phase of pings and extends): the history was not tried", gap)
		}
		d := lease.Deadline()
		if d.Equal(last) {
			continue
		}
		last = d
		prev, ext := wl.last2()
		if !ext.IsZero() && ext.Sub(prev) >= gap && time.Since(ext) < 100*time.Millisecond {
			z.Members[f].Pause(t)
			break
		}
	}
	paused := time.Now()
	defer z.Members[f].Resume(t)
	t.Logf("F paused %v after the extend's write; A's lease valid until +%v", time.Since(last.Add(-ttl)).Round(time.Millisecond), time.Until(lease.Deadline()).Round(time.Millisecond))

	window := 2*ttl + 8*time.Second // past any session timeout asked (2 × TTL + 3/2 × (syncLimit + 1) ticks)
	for time.Since(paused) < window {
		l, err := lockOf(b, "ffail", p, "k").TryAcquire(ctxT(t, 500*time.Millisecond))
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		valid, deadline := lease.Valid(), lease.Deadline()
		granted := time.Now()
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = l.Release(ctxT(t, 5*time.Second))
		t.Logf("B granted %v after the pause, %v after A's lease ended", granted.Sub(paused).Round(time.Millisecond), granted.Sub(deadline).Round(time.Millisecond))
		if valid || granted.Before(deadline) {
			t.Fatalf("two valid leases: B granted %v after the pause while A's lease was valid for another %v", granted.Sub(paused).Round(time.Millisecond), deadline.Sub(granted).Round(time.Millisecond))
		}
		mu.Lock()
		c := cause
		mu.Unlock()
		if !errors.Is(c, lockkit.ErrLockLost) {
			t.Fatalf("B granted, but A's fn was not told its lease was lost (ctx cause %v)", c)
		}
		return
	}
	t.Logf("B was not granted within %v of the pause (A's session lived on): no overlap", window)
}

// writeLog records when each client→server write (a request or a ping) went
// out on the connections it dialled.
type writeLog struct {
	mu     sync.Mutex
	writes []time.Time
}

func (w *writeLog) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &loggedConn{Conn: c, w: w}, nil
}

// last2 are the last two writes' times.
func (w *writeLog) last2() (prev, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.writes); n >= 2 {
		return w.writes[n-2], w.writes[n-1]
	}
	return time.Time{}, time.Time{}
}

type loggedConn struct {
	net.Conn
	w *writeLog
}

func (c *loggedConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	c.w.writes = append(c.w.writes, time.Now())
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}
