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
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
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
	rdb := redis.NewClient(&redis.Options{Addr: f[0], MaxRetries: -1})
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
	drain(bw)
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

// contend runs workers over clients that each take key rounds times through
// the minimal loop, with fencing, and checks exclusion as a resource would
// see it: of two critical sections that overlapped, at most one may find at
// its end that the lock still holds its token (the other's lease was lost
// to the disturbance). Every worker must finish (no hang), every fence is
// issued once, and each worker's fences increase. Workers go on past rounds
// until each has been granted the lock 3 times after disturb returned. disturb runs once, in its
// own goroutine, as soon as a holder sees a non-empty queue; each critical
// section lasts hold. It returns the number of overlapping pairs.
func contend(t *testing.T, ctx context.Context, clients []redis.UniversalClient, key string, workersPer, rounds int, hold time.Duration, disturb func()) int {
	t.Helper()
	type cs struct {
		held     bool // the lock still held its token at the end
		overlaps []int
	}
	var (
		mu          sync.Mutex
		sections    []*cs
		active      = map[int]bool{}
		fences      = map[int64]bool{}
		dup         int
		wg          sync.WaitGroup
		disturbOnce sync.Once
		disturbed   = make(chan struct{})
		errs        = make(chan error, 64)
	)
	for _, rdb := range clients {
		n := NewNotifier(rdb, NotifierOptions{})
		t.Cleanup(func() { _ = n.Close() })
		for range workersPer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last int64
				after := 0 // grants since disturb returned
				for i := 0; i < rounds || after < 3; i++ {
					tok := newToken()
					a, err := acquire(ctx, rdb, n, key, tok, 2*time.Second, 2*time.Second, 100*time.Millisecond, true)
					if err != nil {
						if ctx.Err() != nil {
							errs <- fmt.Errorf("round %d: %w", i, err)
							return
						}
						time.Sleep(50 * time.Millisecond) // the backend is away (failover)
						i--
						continue
					}
					if a.res.Fence <= last {
						errs <- fmt.Errorf("fence %d after this worker's %d", a.res.Fence, last)
					}
					last = a.res.Fence
					if isClosed(disturbed) {
						after++
					}
					mu.Lock()
					if fences[a.res.Fence] {
						dup++
					}
					fences[a.res.Fence] = true
					id := len(sections)
					me := &cs{}
					sections = append(sections, me)
					for o := range active {
						me.overlaps = append(me.overlaps, o)
					}
					active[id] = true
					mu.Unlock()
					if rdb.ZCard(ctx, key+QueueSuffix).Val() > 0 {
						disturbOnce.Do(func() { go func() { disturb(); close(disturbed) }() })
					}
					time.Sleep(hold)
					held := rdb.Get(ctx, key).Val() == tok
					mu.Lock()
					me.held = held
					delete(active, id)
					mu.Unlock()
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
					_, _ = Release(rctx, rdb, key, tok, "")
					cancel()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case <-disturbed:
	default:
		t.Fatal("the disturbance did not run (or did not finish) while the workers ran")
	}
	if dup > 0 {
		t.Errorf("%d fences issued twice", dup)
	}
	pairs := 0
	for i, c := range sections {
		for _, o := range c.overlaps {
			pairs++
			if c.held && sections[o].held {
				t.Errorf("critical sections %d and %d overlapped and both kept the lock: exclusion lost", o, i)
			}
		}
	}
	t.Logf("%d grants; %d overlapping pairs (leases lost to the disturbance, each detected)", len(sections), pairs)
	return pairs
}

func clientsOf(t *testing.T, srv *testserver.Redis, n int) []redis.UniversalClient {
	var cs []redis.UniversalClient
	for range n {
		cs = append(cs, srv.Client(t))
	}
	return cs
}

// TestQueueLossKeepsExclusion: the queue is deleted under contention
// (what a failover to a replica that missed it does) while the lock
// survives: waiters rejoin, nobody overlaps.
func TestQueueLossKeepsExclusion(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := tctx(t, 60*time.Second)
	key := "lock:t{qloss}"
	pairs := contend(t, ctx, clientsOf(t, srv, 2), key, 4, 15, 2*time.Millisecond, func() {
		for range 5 {
			_ = admin.Del(ctx, key+QueueSuffix, key+DeadlinesSuffix).Err()
			time.Sleep(20 * time.Millisecond)
		}
	})
	if pairs != 0 {
		t.Fatalf("%d overlaps with the lock intact", pairs)
	}
}

// TestFlushAllKeepsExclusion: FLUSHALL under contention loses the lock,
// the queue and the fence counter; a holder that lost its lease finds out,
// fences keep increasing, and every waiter still gets the lock.
func TestFlushAllKeepsExclusion(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := tctx(t, 60*time.Second)
	key := "lock:t{flush}"
	// Long holds, so that a waiter's timer finds the flushed lock free
	// while its last holder is still inside.
	pairs := contend(t, ctx, clientsOf(t, srv, 2), key, 4, 3, 150*time.Millisecond, func() {
		for range 3 {
			_ = admin.FlushAll(ctx).Err()
			time.Sleep(200 * time.Millisecond)
		}
	})
	if pairs == 0 {
		t.Fatal("no critical sections overlapped: the FLUSHALLs took no lease away, nothing was tested")
	}
}

// TestSentinelFailoverKeepsExclusion: a Sentinel failover under contention
// (queue and lock on the old primary); the workers carry on through the
// new primary.
func TestSentinelFailoverKeepsExclusion(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireSentinel(t)
	primary := testserver.StartRedis(t)
	testserver.StartReplica(t, primary)
	s := testserver.StartSentinel(t, primary, "fifo", 1)
	ctx := tctx(t, 90*time.Second)
	var clients []redis.UniversalClient
	for range 2 {
		clients = append(clients, s.FailoverClient(t))
	}
	before := s.MasterAddr(t)
	contend(t, ctx, clients, "lock:t{failover}", 4, 40, 2*time.Millisecond, func() {
		s.Failover(t)
	})
	if after := s.MasterAddr(t); after == before {
		t.Fatalf("no failover happened (master still %s)", after)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
