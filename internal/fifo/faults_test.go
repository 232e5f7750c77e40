package fifo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// helperEnv makes the test binary a queued waiter process (see
// TestHelperQueuedWaiter): "addr key token waiterTTLms wake" (wake "-": none).
const helperEnv = "LOCKKIT_FIFO_HELPER"

// TestHelperQueuedWaiter is not a test: run as a child process, it joins a
// lock's queue once, reports it on stdout, and blocks until killed.
func TestHelperQueuedWaiter(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	f := strings.Fields(spec)
	wttl, _ := strconv.Atoi(f[3])
	wake := strings.TrimPrefix(f[4], "-")
	rdb := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true}) // as the README shows users
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := acq(ctx, rdb, f[1], f[2], time.Second, false, time.Duration(wttl)*time.Millisecond, wake)
	if err != nil || r.Granted {
		fmt.Printf("error %+v %v\n", r, err)
		os.Exit(1)
	}
	fmt.Printf("queued %d\n", r.Position)
	<-ctx.Done() // killed long before
	os.Exit(2)
}

// TestKilledWaiterDelaysByTheBound: a waiter process killed while at the
// head of the queue stalls the lock from its last call until its deadline
// (waiterTTL) and at most one fallback interval of the next waiter after
// that; it is not pruned before its deadline.
func TestKilledWaiterDelaysByTheBound(t *testing.T) {
	t.Run("timer-only", func(t *testing.T) { killedWaiter(t, false) })
	t.Run("handover", func(t *testing.T) { killedWaiter(t, true) })
}

// killedWaiter: with handover, the release hands the lock to the dead
// waiter, which keeps it for min(its TTL 1s, its WaiterTTL 1.5s); without,
// the dead waiter blocks the queue until its deadline.
func killedWaiter(t *testing.T, handover bool) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	n := NewNotifier(rdb, NotifierOptions{})
	t.Cleanup(func() { _ = n.Close() })
	ctx := tctx(t, 30*time.Second)
	key := "lock:t{killed}"
	const waiterTTL, fallback = 1500 * time.Millisecond, 200 * time.Millisecond

	holder, dead, live := newToken(), newToken(), newToken()
	if r, _ := acq(ctx, rdb, key, holder, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatal("holder not granted")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperQueuedWaiter$", "-test.count=1")
	wake := "-"
	if handover {
		wake = key + ChannelSuffix + "dead"
	}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d %s", helperEnv, srv.Addr(), key, dead, waiterTTL.Milliseconds(), wake))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "queued 1" {
			t.Fatalf("helper said %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not queue within 10s")
	}
	deadline, err := rdb.ZScore(ctx, key+DeadlinesSuffix, dead).Result() // server ms
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil { // by its PID
		t.Fatal(err)
	}
	<-exited

	type grant struct {
		a   acquisition
		err error
		at  int64 // server ms just after the grant
	}
	done := make(chan grant, 1)
	go func() {
		a, err := acquire(ctx, rdb, n, key, live, time.Second, 5*time.Second, fallback, false)
		done <- grant{a, err, rdb.Time(ctx).Val().UnixMilli()}
	}()
	waitQueued(t, rdb, key, live, 2)
	released := rdb.Time(ctx).Val().UnixMilli()
	if held, _ := Release(ctx, rdb, key, holder, ""); !held {
		t.Fatal("release")
	}
	g := <-done
	if g.err != nil {
		t.Fatal(g.err)
	}
	stall := g.at - released
	t.Logf("dead waiter's deadline %v after the release; the live waiter was granted after %dms (waiterTTL %v, fallback %v); wakes %v",
		time.Duration(int64(deadline)-released)*time.Millisecond, stall, waiterTTL, fallback, g.a.wakes)
	const slack = 300 // ms: scheduling and the race detector
	if handover {
		// The dead waiter held the lock for min(TTL 1s, WaiterTTL 1.5s).
		const px = 1000
		if stall < px-50 {
			t.Fatalf("granted %dms after the release, before the handed-over lock (%dms) expired", stall, px)
		}
		if stall > px+fallback.Milliseconds()+slack {
			t.Fatalf("stall %dms exceeds min(TTL, WaiterTTL) + fallback", stall)
		}
	} else {
		if g.at < int64(deadline) {
			t.Fatalf("granted at %d, before the dead waiter's deadline %d: a waiter was pruned early", g.at, int64(deadline))
		}
		if bound := int64(deadline) + fallback.Milliseconds() + slack; g.at > bound {
			t.Fatalf("granted at %d, after deadline + fallback (+%dms slack) = %d", g.at, slack, bound)
		}
		if stall > (waiterTTL+fallback).Milliseconds()+slack {
			t.Fatalf("stall %dms exceeds waiterTTL + fallback", stall)
		}
	}
	if n := rdb.ZCard(ctx, key+QueueSuffix).Val(); n != 0 {
		t.Fatalf("%d entries left in the queue", n)
	}
}

// TestLostPublishIsRecoveredByTheTimer: the subscriber's connection is
// killed and cannot come back; the release's publish is lost; the head
// still gets the lock on its fallback timer. When the connection comes
// back, go-redis resubscribes, the waiters are told (WakeSubscribed) and
// pushes flow again.
func TestLostPublishIsRecoveredByTheTimer(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	var refuse atomic.Bool
	sub := srv.Client(t, func(o *redis.Options) {
		o.ClientName = "fifo-notifier"
		d := &net.Dialer{Timeout: time.Second}
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, errors.New("test: dialing refused")
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	n := NewNotifier(sub, NotifierOptions{})
	t.Cleanup(func() { _ = n.Close() })
	ctx := tctx(t, 30*time.Second)
	key := "lock:t{lost}"
	const fallback = 300 * time.Millisecond
	holder, b, c := newToken(), newToken(), newToken()
	if r, _ := acq(ctx, rdb, key, holder, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatal("holder not granted")
	}
	rb, _ := acq(ctx, rdb, key, b, 10*time.Second, false, 5*time.Second, n.Channel(key))
	if rc, _ := acq(ctx, rdb, key, c, 10*time.Second, false, 5*time.Second, n.Channel(key)); rb.Position != 1 || rc.Position != 2 {
		t.Fatalf("positions %d, %d", rb.Position, rc.Position)
	}
	bw, cw := n.Subscribe(key, b), n.Subscribe(key, c)
	defer bw.Close()
	defer cw.Close()
	numsub := func() int64 { return rdb.PubSubNumSub(ctx, n.Channel(key)).Val()[n.Channel(key)] }
	waitFor(t, "the subscription", func() bool { return numsub() == 1 })
	// The server lists the subscription before the client has read its
	// confirmation: wait for the wake-up it brings (bw was registered
	// before the subscription was asked for), or it could come after the
	// kill below and pass for a resubscription. cw's, if it came, was
	// delivered with bw's, under the same lock.
	if k, err := bw.Wait(ctx, 5*time.Second); err != nil || k != WakeSubscribed {
		t.Fatalf("after subscribing the head got %v, %v; want WakeSubscribed", k, err)
	}
	drain(cw)

	refuse.Store(true)
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subscriber gone", func() bool { return numsub() == 0 })
	if held, _ := Release(ctx, rdb, key, holder, ""); !held {
		t.Fatal("release")
	}
	start := time.Now()
	k, err := bw.Wait(ctx, rb.Fallback(fallback))
	if err != nil || k != WakeTimer {
		t.Fatalf("head woken by %v, %v; want the timer (the push was lost)", k, err)
	}
	if r, _ := acq(ctx, rdb, key, b, 10*time.Second, false, 5*time.Second, ""); !r.Granted {
		t.Fatalf("head not granted after its timer: %+v", r)
	}
	t.Logf("lost publish recovered after %v (fallback %v)", time.Since(start), fallback)

	refuse.Store(false)
	waitFor(t, "go-redis to resubscribe", func() bool { return numsub() == 1 })
	k, err = cw.Wait(ctx, 5*time.Second)
	if err != nil || k != WakeSubscribed {
		t.Fatalf("after the resubscription the waiter got %v, %v; want WakeSubscribed", k, err)
	}
	if held, _ := Release(ctx, rdb, key, b, ""); !held {
		t.Fatal("release b")
	}
	waitPush(t, ctx, cw)
}

func drain(w *Waiter) {
	for {
		select {
		case <-w.C():
		default:
			return
		}
	}
}

// The fault tests that lose the queue under contention (queue deleted,
// FLUSHALL, Sentinel failover) run at the client level, through
// lockkit.New and a FIFO domain: lockkit/fifo_test.go.
