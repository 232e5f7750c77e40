package lockkit

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// TestFIFOPushIsTheGrant: a handover's push is the waiter's grant, with no
// round trip after it. W's commands go through a proxy that, once W is
// queued and subscribed, answers nothing (W's Notifier connection goes
// straight to the server); H's release hands the lock to W, and W must run
// fn on the push alone, with a lease that is valid, whose token the lock
// holds on the server, and whose fence is the one the handover issued.
func TestFIFOPushIsTheGrant(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	proxy := startToxiproxy(t, r.Addr())
	var direct atomic.Bool
	rdbW := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !direct.Load() {
			addr = proxy.Listen
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { rdbW.Close() })
	warmPool(t, rdbW, 4) // W's command connections: through the proxy

	p := fifoPolicy(10*time.Second, 30*time.Second)
	p.Fencing = true
	dH := fifoDomain(t, newClient(t, r), p)
	dW := fifoDomain(t, newClientOver(t, rdbW, WithCommandTimeout(200*time.Millisecond)), p)
	l := lockOn(dH, "push")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lh, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	direct.Store(true) // the Notifier's connection, dialled at W's first wait

	type seen struct {
		fence       int64
		token, lock string
		valid       bool
	}
	in := make(chan seen, 1)
	done := make(chan error, 1)
	go func() {
		done <- lockOn(dW, "push").Do(ctx, func(ctx context.Context, lease *Lease) error {
			v, err := admin.Get(context.WithoutCancel(ctx), l.Key()).Result()
			in <- seen{fence: lease.fence, token: lease.token, lock: v, valid: lease.Err() == nil}
			return err
		})
	}()
	waitQueueLen(t, admin, l, 1)
	for deadline := time.Now().Add(10 * time.Second); len(admin.PubSubChannels(ctx, l.Key()+":w:*").Val()) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("W never subscribed")
		}
	}
	// From now on W's commands get no answer, and no new connection of W's
	// bypasses the proxy.
	direct.Store(false)
	js := `{"name":"blackhole","type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatal(err)
	}
	defer removeToxic(t, proxy, "blackhole")
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var s seen
	select {
	case s = <-in:
	case err := <-done:
		t.Fatalf("W's Do returned %v without running fn", err)
	case <-time.After(20 * time.Second):
		t.Fatal("W did not run fn within 20s of the handover while its commands went unanswered: the push was not taken as the grant")
	}
	if !s.valid {
		t.Error("W ran fn with a lease already invalid")
	}
	if tok, _, _ := strings.Cut(s.lock, ";"); tok != s.token {
		t.Errorf("inside W's fn the lock holds %q, not W's token %q", s.lock, s.token)
	}
	counter, err := admin.Get(ctx, policy.FenceKey(l.Key())).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := strconv.ParseInt(counter, 10, 64); s.fence != want || want == 0 {
		t.Errorf("W's fence is %d, the counter the handover raised holds %s", s.fence, counter)
	}
	// Its release goes unanswered too: Do ends within the command timeout.
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("W's Do did not return")
	}
}
