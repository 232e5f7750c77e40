package lockkit

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestCloseBoundedDuringPartition: a FIFO waiter is queued (its notifier
// subscribed) through a proxy; the network then drops every connection and
// hangs new ones, so the notifier's Pub/Sub connection is reconnecting with
// no answer. Close with a 300 ms ctx must return within its bound (it took
// 4.4–5.0 s: the notifier's Close waited for a receiver stuck in a
// reconnect under a background ctx), the waiting Do must end with
// ErrClosed, and the client's goroutines must end.
func TestCloseBoundedDuringPartition(t *testing.T) {
	testserver.RequireRedis(t)
	r := testserver.StartRedis(t)
	holder := newClient(t, r)
	p := fifoPolicy(2*time.Second, 20*time.Second)
	hd := fifoDomain(t, holder, p)
	lease, err := lockOn(hd, "part").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())

	base := runtime.NumGoroutine()
	proxy, addr := startProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}) // as the README builds it
	defer rdb.Close()
	w, err := New(goredis.New(rdb), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	wd := fifoDomain(t, w, p)
	done := make(chan error, 1)
	go func() {
		done <- lockOn(wd, "part").Do(context.Background(), func(context.Context, *Lease) error { return nil })
	}()
	direct := r.Client(t)
	waitQueueLen(t, direct, lockOn(hd, "part"), 1)
	time.Sleep(200 * time.Millisecond) // its subscription is made

	// Drop every connection, then hang new ones (data stops both ways).
	addToxic(t, proxy, "reset", "reset_peer", "upstream", `{"timeout":0}`)
	time.Sleep(300 * time.Millisecond)
	if err := proxy.Toxics.RemoveToxic(t.Context(), "reset"); err != nil {
		t.Fatal(err)
	}
	addToxic(t, proxy, "hang-up", "timeout", "upstream", `{"timeout":0}`)
	addToxic(t, proxy, "hang-down", "timeout", "downstream", `{"timeout":0}`)
	time.Sleep(300 * time.Millisecond) // the receiver is reconnecting now

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = w.Close(ctx) // may report what it could not release: the network is gone
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Close with a 300ms ctx took %v during the partition", took)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("the waiting Do returned %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiting Do did not return within 3s of Close")
	}
	rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before the client: leaked\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
