package zookeeper_test

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/zookeeper"
)

// waitAsync runs wt.Wait(ctx, fallback) on a goroutine: its cause (or
// error) arrives on the channel.
func waitAsync(t *testing.T, wt driver.QueueWaiter, fallback time.Duration) <-chan string {
	t.Helper()
	ctx := ctxT(t, fallback+30*time.Second)
	ch := make(chan string, 1)
	go func() {
		cause, err := wt.Wait(ctx, fallback)
		if err != nil {
			cause = "error: " + err.Error()
		}
		ch <- cause
	}()
	return ch
}

// waitCause is what the Wait started by waitAsync returned.
func waitCause(t *testing.T, ch <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case cause := <-ch:
		return cause
	case <-time.After(within):
		t.Fatalf("Wait did not return within %v", within)
		return ""
	}
}

// negativeSeqHolder: see TestSingle/NegativeSeqHolder.
func negativeSeqHolder(t *testing.T, servers []string, raw *zk.Conn) {
	be := openBackend(t, servers)
	q := be.(driver.Queue)
	ctx := ctxT(t, 60*time.Second)
	const key = "lock:{seqwrap}"
	const ttl = 10 * time.Second
	req := func(tok string) *driver.Request { return &driver.Request{Key: key, Token: tok, TTL: ttl} }
	parent := zookeeper.LockPath("/lockkit", key)
	for _, p := range []string{"/lockkit", parent} {
		if _, err := raw.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	// The holder: a node named as the server names a sequential child
	// when the parent's cversion has wrapped to -5, on a session of its
	// own. The next creates are named -4, ... past the wrap; on this fresh
	// parent they are 1, 2, ...: after it, as they would be.
	const holderTok = "HOLDER"
	hconn := dialRaw(t, servers)
	defer hconn.Close()
	held := parent + "/" + zookeeper.NodeName(holderTok) + "-000000005"
	if _, err := hconn.Create(held, []byte("the holder"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	// A polling attempt is contended while the holder's node is there.
	if _, err := be.Acquire(ctx, req("poller")); !errors.Is(err, driver.ErrContended) {
		t.Fatalf("an acquire while %s holds the lock: %v, want ErrContended (nodes %v)", held, err, nodes(t, raw, parent))
	}
	// Who holds it: the holder's token.
	h, ok, err := be.(driver.HolderReader).ReadHolder(ctx, key)
	if err != nil || !ok || h.Token != holderTok || h.Holder != "the holder" {
		t.Fatalf("ReadHolder = %+v, %v, %v; want %s's", h, ok, err, holderTok)
	}
	// A FIFO waiter queues behind it, and is woken and granted when it
	// goes.
	r, err := q.QueueAcquire(ctx, req("waiter"))
	if err != nil || r.Granted || r.Position != 1 {
		t.Fatalf("waiter behind %s: %+v, %v; want queued at 1 (nodes %v)", held, r, err, nodes(t, raw, parent))
	}
	wt := q.QueueSubscribe(key, "waiter")
	defer wt.Close()
	woken := waitAsync(t, wt, 20*time.Second)
	time.Sleep(500 * time.Millisecond) // the watch set, most likely: either way the delete wakes it
	if err := hconn.Delete(held, -1); err != nil {
		t.Fatal(err)
	}
	if cause := waitCause(t, woken, 40*time.Second); cause != "push" {
		t.Fatalf("the waiter's Wait = %q after its predecessor's delete, want push", cause)
	}
	if r, err := q.QueueAcquire(ctx, req("waiter")); err != nil || !r.Granted {
		t.Fatalf("waiter after the holder's delete: %+v, %v; want granted", r, err)
	}
	if h, ok, err := be.(driver.HolderReader).ReadHolder(ctx, key); err != nil || !ok || h.Token != "waiter" {
		t.Fatalf("ReadHolder = %+v, %v, %v; want the waiter's", h, ok, err)
	}
	if held, err := q.QueueRelease(ctx, key, "waiter", ""); err != nil || !held {
		t.Fatalf("waiter's release: %v, %v", held, err)
	}
}

// waiterRequeued: see TestSingle/WaiterRequeued.
func waiterRequeued(t *testing.T, servers []string) {
	be := openBackend(t, servers)
	q := be.(driver.Queue)
	ctx := ctxT(t, 90*time.Second)
	const key = "lock:{requeue}"
	req := func(tok string) *driver.Request { return &driver.Request{Key: key, Token: tok, TTL: 10 * time.Second} }
	if r, err := q.QueueAcquire(ctx, req("H")); err != nil || !r.Granted {
		t.Fatalf("H: %+v, %v", r, err)
	}
	if r, err := q.QueueAcquire(ctx, req("W")); err != nil || r.Granted || r.Position != 1 {
		t.Fatalf("W: %+v, %v; want queued at 1", r, err)
	}
	wt := q.QueueSubscribe(key, "W")
	defer wt.Close()
	woken := waitAsync(t, wt, 20*time.Second)
	if held, err := q.QueueRelease(ctx, key, "H", ""); err != nil || !held {
		t.Fatalf("H's release: %v, %v", held, err)
	}
	if cause := waitCause(t, woken, 40*time.Second); cause != "push" {
		t.Fatalf("W's first Wait = %q, want push", cause)
	}
	if r, err := q.QueueAcquire(ctx, req("W")); err != nil || !r.Granted {
		t.Fatalf("W after H's release: %+v, %v; want granted", r, err)
	}
	// W gives the lock back (a grant too late for its caller, say), and the
	// same token queues again behind H2: a new acquisition, which the
	// waiter must follow.
	if held, err := q.QueueRelease(ctx, key, "W", ""); err != nil || !held {
		t.Fatalf("W's release: %v, %v", held, err)
	}
	if r, err := q.QueueAcquire(ctx, req("H2")); err != nil || !r.Granted {
		t.Fatalf("H2: %+v, %v", r, err)
	}
	if r, err := q.QueueAcquire(ctx, req("W")); err != nil || r.Granted || r.Position != 1 {
		t.Fatalf("W again: %+v, %v; want queued at 1", r, err)
	}
	woken = waitAsync(t, wt, 20*time.Second)
	time.Sleep(500 * time.Millisecond) // the watch set, most likely: either way the delete wakes it
	if held, err := q.QueueRelease(ctx, key, "H2", ""); err != nil || !held {
		t.Fatalf("H2's release: %v, %v", held, err)
	}
	if cause := waitCause(t, woken, 40*time.Second); cause != "push" {
		t.Fatalf("W's Wait after H2's release = %q, want push: the waiter no longer watches the token's predecessor once the token queued again", cause)
	}
	if r, err := q.QueueAcquire(ctx, req("W")); err != nil || !r.Granted {
		t.Fatalf("W after H2's release: %+v, %v; want granted", r, err)
	}
	if held, err := q.QueueRelease(ctx, key, "W", ""); err != nil || !held {
		t.Fatalf("W's last release: %v, %v", held, err)
	}
}

// waiterWatchLost: see TestSingle/WaiterWatchLost.
func waiterWatchLost(t *testing.T, servers []string) {
	px := startProxy(t, servers[0])
	beH := openBackend(t, servers)
	beW := openBackend(t, []string{px.Addr()})
	qH, qW := beH.(driver.Queue), beW.(driver.Queue)
	ctx := ctxT(t, 90*time.Second)
	const key = "lock:{watchlost}"
	// A session that outlives the cut and go-zookeeper's redial.
	req := func(tok string) *driver.Request { return &driver.Request{Key: key, Token: tok, TTL: 10 * time.Second} }
	if r, err := qH.QueueAcquire(ctx, req("H")); err != nil || !r.Granted {
		t.Fatalf("H: %+v, %v", r, err)
	}
	if r, err := qW.QueueAcquire(ctx, req("W")); err != nil || r.Granted || r.Position != 1 {
		t.Fatalf("W: %+v, %v; want queued at 1", r, err)
	}
	wt := qW.QueueSubscribe(key, "W")
	defer wt.Close()
	// The watch's GetW goes out into a black hole, and the connection is
	// cut under it: go-zookeeper fails it with ErrConnectionClosed, which
	// wakes the waiter.
	px.blackhole.Store(true)
	woken := waitAsync(t, wt, 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	px.blackhole.Store(false)
	px.cut()
	if cause := waitCause(t, woken, 40*time.Second); cause != "push" {
		t.Fatalf("W's Wait with its GetW lost = %q, want push", cause)
	}
	// The next attempt (once reconnected, on the same session) finds the
	// same predecessor, H's node.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, err := qW.QueueAcquire(ctx, req("W"))
		if err == nil {
			if r.Granted || r.Position != 1 {
				t.Fatalf("W after the cut: %+v; want queued at 1", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("W's attempts after the cut still fail: %v", err)
		}
	}
	woken = waitAsync(t, wt, 20*time.Second)
	time.Sleep(500 * time.Millisecond) // the watch set, most likely: either way the delete wakes it
	if held, err := qH.QueueRelease(ctx, key, "H", ""); err != nil || !held {
		t.Fatalf("H's release: %v, %v", held, err)
	}
	if cause := waitCause(t, woken, 40*time.Second); cause != "push" {
		t.Fatalf("W's Wait after H's release = %q, want push: the watch lost with the connection was never set again", cause)
	}
	if r, err := qW.QueueAcquire(ctx, req("W")); err != nil || !r.Granted {
		t.Fatalf("W after H's release: %+v, %v; want granted", r, err)
	}
	if held, err := qW.QueueRelease(ctx, key, "W", ""); err != nil || !held {
		t.Fatalf("W's release: %v, %v", held, err)
	}
}
