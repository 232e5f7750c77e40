package fifo

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A release hands its message to a waiter in the same process at once,
// through that waiter's Notifier (another client's, whose Pub/Sub goes
// through a proxy that holds what the server sends, so that nothing but the
// release can wake the waiter before its fallback, a minute away); the
// Pub/Sub copy, let through afterwards, wakes nobody. A handover whose
// message reached no subscriber (the waiter's connection is gone) is not
// delivered in process either, as Pub/Sub did not deliver it; nor is one
// for a Notifier closed.
func TestReleaseHandsOverInProcess(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 20*time.Second)
	p := startHoldingProxy(t, srv.Addr())
	var refuse atomic.Bool
	sub := redis.NewClient(&redis.Options{Addr: p.addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("test: dialing refused")
		}
		return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
	}})
	defer sub.Close()
	n := NewNotifier(sub, NotifierOptions{})
	defer n.Close()
	key := "lock:{inproc}"
	ch := n.Channel(key)
	holder, waiter, third := newToken(), newToken(), newToken()
	if r, err := acq(ctx, rdb, key, holder, 10*time.Second, true, 2*time.Second, ""); err != nil || !r.Granted {
		t.Fatal(r, err)
	}
	queue := func(tok string) Result {
		t.Helper()
		q, err := Acquire(ctx, rdb, &Request{Key: key, Token: tok, TTL: 10 * time.Second, WaiterTTL: 2 * time.Second, Fencing: true, Notifier: n})
		if err != nil || q.Granted || q.Joined == 0 {
			t.Fatal(q, err)
		}
		return q
	}
	q := queue(waiter)
	w := n.Subscribe(key, waiter)
	defer w.Close()
	if k, err := w.Wait(ctx, 10*time.Second); err != nil || k != WakeSubscribed {
		t.Fatalf("after subscribing: %v, %v; want WakeSubscribed", k, err)
	}
	p.hold(true)
	if held, err := Release(ctx, rdb, key, holder, "00-prev-01"); err != nil || !held {
		t.Fatal(held, err)
	}
	k, err := w.Wait(ctx, time.Minute)
	if err != nil || k != WakePush {
		t.Fatalf("Wait = %v, %v; want the release's push", k, err)
	}
	g, ok := w.Granted()
	fence, _ := rdb.Get(ctx, key+FenceSuffix).Int64()
	if !ok || g.Joined != q.Joined || g.Fence != fence || g.Previous != "00-prev-01" || g.LockTTL != 2*time.Second {
		t.Fatalf("grant %+v, %v; want joined %d, fence %d, previous, 2s", g, ok, q.Joined, fence)
	}
	if v := rdb.Get(ctx, key).Val(); v != waiter {
		t.Fatalf("the lock holds %q, want the waiter", v)
	}
	// The published copy comes through, then a marker behind it: once the
	// marker is in, the copy was read, and it woke nobody.
	p.hold(false)
	if err := rdb.Publish(ctx, ch, "marker").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the marker", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return slices.Contains(w.g.chans[ch].recent[:], "marker")
	})
	select {
	case k := <-w.C():
		t.Fatalf("the published copy of the handover woke the waiter again (%v)", k)
	default:
	}

	// The subscription gone (and kept away): the next handover reaches no
	// subscriber, and waits for the waiter's timer.
	queue(third)
	w3 := n.Subscribe(key, third)
	defer w3.Close()
	refuse.Store(true)
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subscriber gone", func() bool { return rdb.PubSubNumSub(ctx, ch).Val()[ch] == 0 })
	drain(w3)
	if held, err := Release(ctx, rdb, key, waiter, ""); err != nil || !held {
		t.Fatal(held, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != third {
		t.Fatalf("the lock holds %q, want the third waiter", v)
	}
	if g, ok := w3.Granted(); ok {
		t.Fatalf("a waiter no subscription reached got grant %+v in process", g)
	}
	select {
	case k := <-w3.C():
		t.Fatalf("a waiter no subscription reached was woken (%v)", k)
	default:
	}
	if r, _ := acq(ctx, rdb, key, third, 10*time.Second, true, 2*time.Second, ""); !r.Granted || !r.Earlier {
		t.Fatalf("the third waiter's attempt: %+v, want the handover", r)
	}

	n.Close()
	if _, ok := local.Load(n.id); ok {
		t.Fatal("a closed Notifier is still reachable in process")
	}
}

// holdingProxy forwards TCP to a server; while held, what the server sends
// waits in the proxy (what the client sends goes through).
type holdingProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	held bool
	cond *sync.Cond
}

func startHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	var conns sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		p.hold(false)
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			conns.Add(2)
			go func() {
				defer conns.Done()
				_, _ = io.Copy(s, c)
				_ = s.Close()
			}()
			go func() {
				defer conns.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					m, err := s.Read(buf)
					p.mu.Lock()
					for p.held {
						p.cond.Wait()
					}
					p.mu.Unlock()
					if m > 0 {
						if _, werr := c.Write(buf[:m]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

func (p *holdingProxy) addr() string { return p.ln.Addr().String() }

func (p *holdingProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// deliver drops a second copy of a handover's message, and only that: a
// plain wake-up, a handover for a new place (the token rejoined) and a
// v0.1.0 handover, which names no place, wake the waiter each time.
func TestDeliverDropsOnlyACopyOfAHandover(t *testing.T) {
	n := &Notifier{}
	w := &Waiter{n: n, token: "t", c: make(chan Wake, 1)}
	woken := func(payload string) bool {
		said := w.deliver(payload)
		select {
		case <-w.c:
			if !said {
				t.Fatalf("deliver(%q) woke the waiter and said it did not", payload)
			}
			return true
		default:
			if said {
				t.Fatalf("deliver(%q) said it woke the waiter", payload)
			}
			return false
		}
	}
	for _, c := range []struct {
		payload string
		wake    bool
	}{
		{"t 5 2000  100", true},
		{"t 5 2000  100", false},
		{"t", true},
		{"t", true},
		{"t 6 2000  200", true},
		{"t 5 2000  100", true}, // not the last one delivered: a stale push wakes
		{"t 7 2000 ", true},     // v0.1.0's
		{"t 7 2000 ", true},
	} {
		if got := woken(c.payload); got != c.wake {
			t.Fatalf("deliver(%q) woke: %v, want %v", c.payload, got, c.wake)
		}
	}
	if g, ok := w.Granted(); !ok || g.Fence != 7 || g.Joined != 0 {
		t.Fatalf("grant %+v, %v; want v0.1.0's last, fence 7, no place", g, ok)
	}
}

// parseHandover reads what Waiter.deliver read with SplitN before: every
// form a releaser of v0.1.0 or of this version publishes, and junk.
func TestParseHandover(t *testing.T) {
	for _, c := range []struct {
		payload string
		ok      bool
		want    Result
	}{
		{"t", false, Result{}},
		{"t 5 2000", false, Result{}},
		{"t 5 2000 ", true, Result{Fence: 5, LockTTL: 2 * time.Second}},
		{"t 5 2000 a-b", true, Result{Fence: 5, LockTTL: 2 * time.Second, Previous: "a-b"}},
		{"t 5 2000 a-b 12", true, Result{Fence: 5, LockTTL: 2 * time.Second, Previous: "a-b", Joined: 12}},
		{"t 5 2000  12", true, Result{Fence: 5, LockTTL: 2 * time.Second, Joined: 12}},
		{"t 5 2000  12 x", true, Result{Fence: 5, LockTTL: 2 * time.Second}},
		{"t 5 2000  -3", true, Result{Fence: 5, LockTTL: 2 * time.Second}},
		{"t x 2000 ", false, Result{}},
		{"t 5 0 ", false, Result{}},
		{"t 9223372036854775807 1 ", true, Result{Fence: 1<<63 - 1, LockTTL: time.Millisecond}},
	} {
		got, ok := parseHandover(c.payload)
		if ok {
			c.want.Granted, c.want.Earlier = true, true
		}
		if ok != c.ok || got != c.want {
			t.Fatalf("parseHandover(%q) = %+v, %v; want %+v, %v", c.payload, got, ok, c.want, c.ok)
		}
	}
}
