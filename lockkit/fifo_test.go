package lockkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/telnames"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The client-level tests of FIFO waiting (Policy.Wait = "fifo"): through
// New, a FIFO domain and Lock.Do/Acquire, on real redis-servers.
// internal/fifo tests the scripts and the Notifier on their own.

// fifoPolicy is a FIFO domain's policy: waits bounded by maxWait.
func fifoPolicy(ttl, maxWait time.Duration) Policy {
	return Policy{TTL: ttl, Wait: "fifo", Retry: Retry{Attempts: 2, MaxWait: maxWait}}
}

// fifoDomain binds the FIFO domain of the test on c; every client of a test
// gets the same keys.
func fifoDomain(t *testing.T, c *Client, p Policy) *Domain {
	t.Helper()
	return testDomain(t, c, p)
}

// queueLen is the number of waiters queued on l's key.
func queueLen(t *testing.T, rdb *redis.Client, l Lock) int64 {
	t.Helper()
	return rdb.ZCard(context.Background(), l.Key()+fifo.QueueSuffix).Val()
}

// waitQueueLen waits until n waiters are queued on l's key.
func waitQueueLen(t *testing.T, rdb *redis.Client, l Lock, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queueLen(t, rdb, l) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued on %s, want %d", queueLen(t, rdb, l), l.Key(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// wakeCauses counts the lockkit.wake events of the acquire spans by cause,
// the acquire spans with a queue position, and those with a link.
func wakeCauses(spans []tracetest.SpanStub) (causes map[string]int, positioned, linked int) {
	causes = map[string]int{}
	for _, s := range spans {
		for _, e := range s.Events {
			if e.Name != telnames.EventWake {
				continue
			}
			for _, a := range e.Attributes {
				if a.Key == telnames.AttrWakeCause {
					causes[a.Value.AsString()]++
				}
			}
		}
		for _, a := range s.Attributes {
			if a.Key == telnames.AttrQueuePosition && a.Value.AsInt64() > 0 {
				positioned++
			}
		}
		if len(s.Links) > 0 {
			linked++
		}
	}
	return causes, positioned, linked
}

// TestFIFOGrantsInArrivalOrder: waiters on four clients queue one after
// another behind a holder; the release hands the lock down the queue in
// exactly that order, one at a time; each handed-over lease can be
// extended (the handover wrote a holder value its owner check accepts);
// the waiters' acquire spans carry their queue position, wake-up events
// (by push), and a link to the previous holder's hold span.
func TestFIFOGrantsInArrivalOrder(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rigs []*telRig
	var doms []*Domain
	for range 4 {
		g := newTelRig(t, r)
		rigs = append(rigs, g)
		doms = append(doms, fifoDomain(t, g.c, fifoPolicy(2*time.Second, 30*time.Second)))
	}
	first := lockOn(doms[0], "ordered")
	lease, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	var (
		mu    sync.Mutex
		order []int
		in    overlap
		wg    sync.WaitGroup
		errs  = make(chan error, waiters)
	)
	for i := range waiters {
		l := lockOn(doms[i%4], "ordered")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.Do(ctx, func(ctx context.Context, lease *Lease) error {
				leave := in.enter()
				defer leave()
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if v := admin.Get(ctx, l.Key()).Val(); !holder.Owns(v, lease.Token()) {
					return fmt.Errorf("waiter %d: the lock holds %q, not its token", i, v)
				}
				if err := lease.Extend(ctx); err != nil {
					return fmt.Errorf("waiter %d: extend: %w", i, err)
				}
				time.Sleep(time.Millisecond)
				return nil
			})
		}()
		waitQueueLen(t, admin, first, int64(i+1))
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("grants in the order %v, want the arrival order 0..%d", order, waiters-1)
		}
	}
	if in.Max() != 1 {
		t.Fatalf("%d holders at once", in.Max())
	}
	if n := queueLen(t, admin, first); n != 0 {
		t.Fatalf("%d waiters left in the queue", n)
	}
	var acquires []tracetest.SpanStub
	for _, g := range rigs {
		acquires = append(acquires, g.named("lockkit.acquire test")...)
	}
	causes, positioned, linked := wakeCauses(acquires)
	t.Logf("wake-ups %v; %d acquire spans with a queue position, %d linked to the previous holder", causes, positioned, linked)
	if causes["push"] == 0 {
		t.Fatal("no waiter was woken by a push")
	}
	if positioned < waiters {
		t.Fatalf("%d acquire spans carry a queue position, want %d", positioned, waiters)
	}
	if linked < waiters {
		t.Fatalf("%d acquire spans link to the previous holder, want %d", linked, waiters)
	}
}

// TestFIFOContentionKeepsExclusion: 16 contenders over 4 clients, each
// taking the lock in turn many times; a non-atomic increment under the lock
// loses nothing, no two holders overlap, every Do returns nil, and the queue
// is empty at the end.
func TestFIFOContentionKeepsExclusion(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const clients, per, rounds = 4, 4, 10
	var (
		in   overlap
		wg   sync.WaitGroup
		errs = make(chan error, clients*per)
		l0   Lock
	)
	for c := range clients {
		rdb := r.Client(t)
		d := fifoDomain(t, newClientOver(t, rdb, WithCommandTimeout(time.Second)), fifoPolicy(2*time.Second, 60*time.Second))
		l := lockOn(d, "busy")
		l0 = l
		for range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					err := l.Do(ctx, func(ctx context.Context, _ *Lease) error {
						leave := in.enter()
						defer leave()
						return incrNonAtomic(ctx, rdb, "counter:"+t.Name(), time.Millisecond)
					})
					if err != nil {
						errs <- fmt.Errorf("client %d: %w", c, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, _ := admin.Get(ctx, "counter:"+t.Name()).Int(); n != clients*per*rounds {
		t.Fatalf("counter %d, want %d: increments under the lock were lost", n, clients*per*rounds)
	}
	if in.Max() != 1 {
		t.Fatalf("%d holders at once", in.Max())
	}
	if n := queueLen(t, admin, l0); n != 0 {
		t.Fatalf("%d waiters left in the queue", n)
	}
}

// TestFIFOWaiterLeavesTheQueue: a waiter whose ctx is cancelled, one whose
// MaxWait passes and a TryDo all leave the queue as they return; the
// waiter behind them keeps its place and gets the lock on the release.
func TestFIFOWaiterLeavesTheQueue(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1, c2 := newClient(t, r), newClient(t, r)
	d1 := fifoDomain(t, c1, fifoPolicy(5*time.Second, 30*time.Second))
	d2 := fifoDomain(t, c2, fifoPolicy(5*time.Second, 30*time.Second))
	short := fifoDomain(t, c2, fifoPolicy(5*time.Second, 300*time.Millisecond))
	l := lockOn(d1, "leave")
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *Lease) error { return nil }

	actx, cancelA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() { aDone <- lockOn(d2, "leave").Do(actx, noop) }()
	waitQueueLen(t, admin, l, 1)
	bDone := make(chan error, 1)
	go func() { bDone <- lockOn(d1, "leave").Do(ctx, noop) }()
	waitQueueLen(t, admin, l, 2)

	cancelA()
	if err := <-aDone; !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	if n := queueLen(t, admin, l); n != 1 {
		t.Fatalf("%d queued after the cancelled waiter returned, want 1", n)
	}
	if err := lockOn(short, "leave").Do(ctx, noop); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a waiter past its MaxWait: %v, want ErrNotAcquired", err)
	}
	if n := queueLen(t, admin, l); n != 1 {
		t.Fatalf("%d queued after the MaxWait waiter returned, want 1", n)
	}
	if err := lockOn(d2, "leave").TryDo(ctx, noop); err != ErrNotAcquired {
		t.Fatalf("TryDo on a held lock: %v, want the bare ErrNotAcquired", err)
	}
	if n := queueLen(t, admin, l); n != 1 {
		t.Fatalf("%d queued after TryDo returned, want 1", n)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("the waiter that stayed: %v", err)
	}
	if n := queueLen(t, admin, l); n != 0 {
		t.Fatalf("%d queued at the end", n)
	}
}

// TestFIFOLostPublishIsRecoveredByTheTimer: the waiter's client loses its
// Pub/Sub connection (CLIENT KILL TYPE pubsub) and cannot reconnect; the
// release's push is lost; the waiter still gets the lock, woken by its
// fallback timer, not by a push.
func TestFIFOLostPublishIsRecoveredByTheTimer(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var refuse atomic.Bool
	sub := r.Client(t, func(o *redis.Options) {
		o.PoolSize = 4
		d := &net.Dialer{Timeout: time.Second}
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, errors.New("test: dialing refused")
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	holderDom := fifoDomain(t, newClient(t, r), fifoPolicy(5*time.Second, 30*time.Second))
	g := newTelRigOver(t, sub)
	waiterDom := fifoDomain(t, g.c, fifoPolicy(5*time.Second, 30*time.Second))
	l := lockOn(holderDom, "lost")
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A command connection for the waiter, dialled before dialling is refused.
	if err := sub.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- lockOn(waiterDom, "lost").Do(ctx, func(context.Context, *Lease) error { return nil })
	}()
	waitQueueLen(t, admin, l, 1)
	deadlineOf := func() []redis.Z { return admin.ZRangeWithScores(ctx, l.Key()+fifo.DeadlinesSuffix, 0, -1).Val() }
	first := deadlineOf()
	channels := func() int { return len(admin.PubSubChannels(ctx, l.Key()+fifo.ChannelSuffix+"*").Val()) }
	waitUntil(t, "the waiter's subscription", func() bool { return channels() == 1 })
	// The subscription's confirmation wakes the waiter, which checks again
	// (and refreshes its deadline): wait for that, so that the wake-up
	// cannot come after the kill and pass for the recovery.
	waitUntil(t, "the waiter's check after subscribing", func() bool {
		d := deadlineOf()
		return len(d) == 1 && len(first) == 1 && d[0].Score != first[0].Score
	})
	refuse.Store(true)
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the subscriber gone", func() bool { return channels() == 0 })
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiter whose push was lost: %v", err)
	}
	refuse.Store(false)
	causes, _, _ := wakeCauses(g.named("lockkit.acquire test"))
	t.Logf("wake-ups %v", causes)
	if causes["push"] != 0 || causes["timer"] == 0 {
		t.Fatalf("wake-ups %v: want the timer and no push (the push was lost)", causes)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fifoContend runs workers over clients, each taking the domain's lock
// rounds times with Do (fencing on) and more until it has had the lock 3
// times after disturb returned; disturb runs once, as soon as a holder sees
// a queue. Exclusion as the resource sees it: of two critical sections that
// overlapped, at most one may have returned nil from Do (the other must
// have been told its lease was lost). Every worker finishes. It returns the
// number of overlapping pairs.
func fifoContend(t *testing.T, ctx context.Context, rdbs []redis.UniversalClient, admin redis.UniversalClient, workersPer, rounds int, hold time.Duration, disturb func()) int {
	t.Helper()
	type cs struct {
		ok       bool
		overlaps []int
	}
	var (
		mu          sync.Mutex
		sections    []*cs
		active      = map[int]bool{}
		wg          sync.WaitGroup
		disturbOnce sync.Once
		disturbed   = make(chan struct{})
		errs        = make(chan error, 64)
	)
	for _, rdb := range rdbs {
		c := newClientOver(t, rdb, WithCommandTimeout(300*time.Millisecond))
		p := fifoPolicy(2*time.Second, 20*time.Second)
		p.Fencing = true
		l := lockOn(fifoDomain(t, c, p), "contend")
		for range workersPer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last int64
				after := 0
				for i := 0; i < rounds || after < 3; i++ {
					var me *cs
					err := l.Do(ctx, func(ctx context.Context, lease *Lease) error {
						if lease.Fence() <= last {
							errs <- fmt.Errorf("fence %d after this worker's %d", lease.Fence(), last)
						}
						last = lease.Fence()
						if isDone(disturbed) {
							after++
						}
						mu.Lock()
						id := len(sections)
						me = &cs{}
						sections = append(sections, me)
						for o := range active {
							me.overlaps = append(me.overlaps, o)
						}
						active[id] = true
						mu.Unlock()
						if admin.ZCard(ctx, l.Key()+fifo.QueueSuffix).Val() > 0 {
							disturbOnce.Do(func() { go func() { disturb(); close(disturbed) }() })
						}
						time.Sleep(hold)
						mu.Lock()
						delete(active, id)
						mu.Unlock()
						return nil
					})
					if me != nil {
						mu.Lock()
						me.ok = err == nil
						mu.Unlock()
					}
					switch {
					case err == nil, errors.Is(err, ErrLockLost):
					case ctx.Err() != nil:
						errs <- fmt.Errorf("round %d: %w", i, err)
						return
					default:
						time.Sleep(20 * time.Millisecond) // the backend is away (failover)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !isDone(disturbed) {
		t.Fatal("the disturbance did not run (or did not finish) while the workers ran")
	}
	pairs := 0
	for i, c := range sections {
		for _, o := range c.overlaps {
			pairs++
			if c.ok && sections[o].ok {
				t.Errorf("critical sections %d and %d overlapped and both returned nil: exclusion lost", o, i)
			}
		}
	}
	t.Logf("%d grants; %d overlapping pairs (leases lost to the disturbance, each reported)", len(sections), pairs)
	return pairs
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func clientsOn(t *testing.T, r *testserver.Redis, n int) []redis.UniversalClient {
	var cs []redis.UniversalClient
	for range n {
		cs = append(cs, r.Client(t))
	}
	return cs
}

// TestFIFOQueueLossKeepsExclusion: the queue is deleted under contention
// (what a failover to a replica that missed it does) while the lock
// survives: waiting turns unfair for a moment, nobody overlaps.
func TestFIFOQueueLossKeepsExclusion(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	key := "lock:" + t.Name() + ":{id:contend}"
	pairs := fifoContend(t, ctx, clientsOn(t, r, 2), admin, 4, 15, 2*time.Millisecond, func() {
		for range 5 {
			_ = admin.Del(ctx, key+fifo.QueueSuffix, key+fifo.DeadlinesSuffix, key+fifo.WaitersSuffix).Err()
			time.Sleep(20 * time.Millisecond)
		}
	})
	if pairs != 0 {
		t.Fatalf("%d overlaps with the lock intact", pairs)
	}
}

// TestFIFOFlushAllKeepsExclusion: FLUSHALL under contention loses the lock,
// the queue and the fence counter; a holder whose lease went with them is
// told (Do returns ErrLockLost), and every waiter still gets the lock.
func TestFIFOFlushAllKeepsExclusion(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	fifoContend(t, ctx, clientsOn(t, r, 2), admin, 4, 3, 150*time.Millisecond, func() {
		for range 3 {
			_ = admin.FlushAll(ctx).Err()
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// TestFIFOSentinelFailoverKeepsExclusion: a Sentinel failover under
// contention, queue and lock on the old primary; the workers carry on
// through the new one and exclusion holds as the resource sees it.
func TestFIFOSentinelFailoverKeepsExclusion(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireSentinel(t)
	primary := testserver.StartRedis(t)
	testserver.StartReplica(t, primary)
	s := testserver.StartSentinel(t, primary, "fifo", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var rdbs []redis.UniversalClient
	for range 2 {
		rdbs = append(rdbs, s.FailoverClient(t))
	}
	before := s.MasterAddr(t)
	fifoContend(t, ctx, rdbs, s.FailoverClient(t), 4, 40, 2*time.Millisecond, func() { s.Failover(t) })
	if after := s.MasterAddr(t); after == before {
		t.Fatalf("no failover happened (master still %s)", after)
	}
}

// TestFIFOKilledWaiterDelaysByTheBound: a waiter process (a lockkit client
// in Do, re-exec'd) is killed by its PID while at the head of the queue;
// after the release, the next waiter gets the lock within the documented
// bound, policy.FIFODeadWaiterBound(TTL) (with slack for a loaded machine),
// and the queue is empty at the end.
func TestFIFOKilledWaiterDelaysByTheBound(t *testing.T) {
	if addr := os.Getenv("LOCKKIT_FIFO_WAITER"); addr != "" {
		fifoWaiterChild(addr, os.Getenv("LOCKKIT_FIFO_KEY"))
		return
	}
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ttl = time.Second
	d := fifoDomain(t, newClient(t, r), fifoPolicy(ttl, 30*time.Second))
	l := lockOn(d, "killed")
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	child := testserver.StartChild(t, "^TestFIFOKilledWaiterDelaysByTheBound$", "LOCKKIT_FIFO_WAITER="+r.Addr(), "LOCKKIT_FIFO_KEY="+l.Key())
	waitQueueLen(t, admin, l, 1)
	child.Signal(t, syscall.SIGKILL)
	_ = child.Wait(t, 10*time.Second)

	granted := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- l.Do(ctx, func(ctx context.Context, _ *Lease) error {
			granted <- admin.Time(ctx).Val().UnixMilli()
			return nil
		})
	}()
	waitQueueLen(t, admin, l, 2)
	released := admin.Time(ctx).Val().UnixMilli()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stall := time.Duration(<-granted-released) * time.Millisecond
	bound := policy.FIFODeadWaiterBound(ttl)
	const slack = time.Second // scheduling on a loaded machine, the race detector
	t.Logf("the live waiter was granted %v after the release (bound %v)", stall, bound)
	if stall > bound+slack {
		t.Fatalf("a dead waiter stalled the lock for %v, more than the bound %v (+%v slack)", stall, bound, slack)
	}
	if n := queueLen(t, admin, l); n != 0 {
		t.Fatalf("%d waiters left in the queue", n)
	}
}

// fifoWaiterChild is the child process of TestFIFOKilledWaiterDelaysByTheBound:
// it waits in the queue until it is killed.
func fifoWaiterChild(addr, key string) {
	c, err := New(goredis.New(redis.NewClient(&redis.Options{Addr: addr})))
	if err != nil {
		fmt.Println("error " + err.Error())
		os.Exit(1)
	}
	d := c.Domain(DomainSpec{Name: "test", Policy: fifoPolicy(time.Second, 50*time.Second)})
	err = Lock{d: d, key: key}.Do(context.Background(), func(context.Context, *Lease) error {
		fmt.Println("granted")
		select {}
	})
	fmt.Println("error " + strconv.Quote(fmt.Sprint(err)))
	os.Exit(1)
}

// TestFIFORefusals: FIFO waiting is refused, with a clear error, where it
// cannot keep its promise: Redlock (no single queue over N nodes), Replicas
// (a handover cannot WAIT), and a wait with attempts but no MaxWait.
func TestFIFORefusals(t *testing.T) {
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, testserver.StartRedis(t).Client(t))
	}
	rl := newClientOn(t, goredis.Redlock(nodes...))
	d := rl.Domain(DomainSpec{Name: "rl", Policy: fifoPolicy(time.Second, time.Second)})
	if err := d.Err(); err == nil || !containsAll(err.Error(), "wait fifo", "Redlock") {
		t.Fatalf("FIFO on Redlock: %v", err)
	}
	c := newClientOver(t, fakeUniversal(t))
	p := fifoPolicy(time.Second, time.Second)
	p.Replicas = 1
	if err := c.Domain(DomainSpec{Name: "r", Policy: p}).Err(); err == nil || !containsAll(err.Error(), "wait fifo", "replicas") {
		t.Fatalf("FIFO with replicas: %v", err)
	}
	p = fifoPolicy(time.Second, 0)
	if err := c.Domain(DomainSpec{Name: "w", Policy: p}).Err(); err == nil || !containsAll(err.Error(), "max_wait") {
		t.Fatalf("FIFO without a max wait: %v", err)
	}
	p.Retry.Attempts = 1 // a single attempt needs no bound
	if err := c.Domain(DomainSpec{Name: "one", Policy: p}).Err(); err != nil {
		t.Fatalf("FIFO with a single attempt: %v", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestFIFOClusterLocksOnAllSlots: on a 3-master Cluster, through the
// client, a FIFO lock in every one of the 16384 slots is taken, contended
// (the contender joins and leaves the queue), and given back: a script that
// touched a key or a channel in another slot would fail. On keys spread over
// every master, a waiter queued behind a holder is handed the lock on the
// release, woken by a sharded push (SPUBLISH, SSUBSCRIBE to the slot's
// master).
func TestFIFOClusterLocksOnAllSlots(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireRedisCLI(t)
	cl := testserver.StartCluster(t, 3)
	rdb := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	// A long command timeout: under the full suite on two cores a command
	// can take more than the default 500ms, and this test is about slots
	// (a script touching another slot fails with CROSSSLOT, not a timeout).
	slow := WithCommandTimeout(3 * time.Second)
	d1 := fifoDomain(t, newClientOver(t, rdb, slow), fifoPolicy(5*time.Second, 30*time.Second))
	g := newTelRigOver(t, cl.Client(t), slow)
	d2 := fifoDomain(t, g.c, fifoPolicy(5*time.Second, 30*time.Second))

	keys := testserver.KeyPerSlot()
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Int32
		errs   = make(chan error, 8)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) || failed.Load() > 0 {
					return
				}
				k := keys[i]
				lease, err := Lock{d: d1, key: k}.TryAcquire(ctx)
				if err == nil {
					if err = (Lock{d: d2, key: k}).TryDo(ctx, func(context.Context, *Lease) error { return nil }); err == ErrNotAcquired {
						err = lease.Release(ctx)
					} else {
						err = fmt.Errorf("contender: %v, want ErrNotAcquired", err)
					}
				}
				if err != nil {
					failed.Add(1)
					errs <- fmt.Errorf("slot %d (%s): %w", i, k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for _, km := range testserver.KeysPerMaster(t, ctx, rdb, keys, 4, 3) {
		k, m := km.Key, km.Master
		lease, err := Lock{d: d1, key: k}.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- Lock{d: d2, key: k}.Do(ctx, func(context.Context, *Lease) error { return nil })
		}()
		waitUntil(t, "the waiter queued on "+k, func() bool { return rdb.ZCard(ctx, k+fifo.QueueSuffix).Val() == 1 })
		waitUntil(t, "the shard subscription of "+k, func() bool {
			v, _ := m.Do(ctx, "PUBSUB", "SHARDCHANNELS", k+fifo.ChannelSuffix+"*").Slice()
			return len(v) == 1
		})
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%s: the waiter: %v", k, err)
		}
	}
	causes, _, _ := wakeCauses(g.named("lockkit.acquire test"))
	t.Logf("wake-ups %v", causes)
	if causes["push"] == 0 {
		t.Fatal("no waiter on the Cluster was woken by a push")
	}
}

// TestFIFOHandedOverLeaseIsRenewedInTime: a handover gives the lock for
// min(TTL, the waiter TTL) only; with a TTL longer than the waiter TTL the
// new holder's first renewal comes early enough to extend it to its full
// TTL, so a holder that keeps the lock past the handover's TTL keeps it.
func TestFIFOHandedOverLeaseIsRenewedInTime(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ttl = 9 * time.Second // renewed every 3s; a handover gives 2s
	d1 := fifoDomain(t, newClient(t, r), fifoPolicy(ttl, 30*time.Second))
	d2 := fifoDomain(t, newClient(t, r), fifoPolicy(ttl, 30*time.Second))
	l := lockOn(d1, "renew")
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- lockOn(d2, "renew").Do(ctx, func(ctx context.Context, lease *Lease) error {
			if pttl := admin.PTTL(ctx, l.Key()).Val(); pttl > policy.FIFOWaiterTTL {
				return fmt.Errorf("the handover gave the lock %v, want at most the waiter TTL %v", pttl, policy.FIFOWaiterTTL)
			}
			select {
			case <-time.After(policy.FIFOWaiterTTL + 500*time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("lease lost: %w", context.Cause(ctx))
			}
			if err := lease.Err(); err != nil {
				return err
			}
			if pttl := admin.PTTL(ctx, l.Key()).Val(); pttl <= policy.FIFOWaiterTTL {
				return fmt.Errorf("past the handover's TTL the lock has %v left: it was not extended to its TTL %v", pttl, ttl)
			}
			return nil
		})
	}()
	waitQueueLen(t, admin, l, 1)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFIFODoAll: DoAll over FIFO domains takes each lock with a single
// FIFO attempt: a lock found held is left at once (no place kept in its
// queue while the set waits), nothing of the set stays held, and a set that
// gets its locks releases them to the queue (the waiter behind is handed
// its lock).
func TestFIFODoAll(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1, c2 := newClient(t, r), newClient(t, r)
	d1 := fifoDomain(t, c1, fifoPolicy(5*time.Second, 300*time.Millisecond))
	d2 := fifoDomain(t, c2, fifoPolicy(5*time.Second, 30*time.Second))
	a, b := lockOn(d1, "a"), lockOn(d1, "b")
	lease, err := lockOn(d2, "a").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = DoAll(ctx, func(context.Context, *LeaseSet) error { ran = true; return nil }, a, b)
	if !errors.Is(err, ErrNotAcquired) || ran {
		t.Fatalf("DoAll with a held: %v (fn ran: %v), want ErrNotAcquired", err, ran)
	}
	if n := queueLen(t, admin, a); n != 0 {
		t.Fatalf("DoAll left %d entries in a's queue", n)
	}
	if v := admin.Exists(ctx, b.Key()).Val(); v != 0 {
		t.Fatal("DoAll left b held")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The set holds both; a waiter queues on a behind it and is handed a
	// when the set releases.
	inSet := make(chan struct{})
	goOn := make(chan struct{})
	setDone := make(chan error, 1)
	go func() {
		setDone <- DoAll(ctx, func(context.Context, *LeaseSet) error {
			close(inSet)
			<-goOn
			return nil
		}, a, b)
	}()
	<-inSet
	waiterDone := make(chan error, 1)
	waiterGo := make(chan struct{})
	go func() {
		waiterDone <- lockOn(d2, "a").Do(ctx, func(context.Context, *Lease) error { <-waiterGo; return nil })
	}()
	waitQueueLen(t, admin, a, 1)
	close(goOn)
	if err := <-setDone; err != nil {
		t.Fatal(err)
	}
	// Handed over by the release script itself (not deleted and left to the
	// waiter's timer): a is held the moment DoAll returns, until the
	// waiter's fn lets go.
	if v := admin.Exists(ctx, a.Key()).Val(); v != 1 {
		t.Fatal("the set's release deleted a instead of handing it to the waiter queued behind")
	}
	close(waiterGo)
	if err := <-waiterDone; err != nil {
		t.Fatalf("the waiter behind the set: %v", err)
	}
}

// TestFIFOOneSubscriptionPerKeyPerClient: waiters of one client on one key
// share one subscription (one channel, one Pub/Sub connection per client),
// however many wait.
func TestFIFOOneSubscriptionPerKeyPerClient(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holderDom := fifoDomain(t, newClient(t, r), fifoPolicy(5*time.Second, 30*time.Second))
	l := lockOn(holderDom, "shared")
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const clients, per = 2, 3
	var wg sync.WaitGroup
	errs := make(chan error, clients*per)
	for range clients {
		d := fifoDomain(t, newClient(t, r), fifoPolicy(5*time.Second, 30*time.Second))
		for range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- lockOn(d, "shared").Do(ctx, func(context.Context, *Lease) error { return nil })
			}()
		}
	}
	waitQueueLen(t, admin, l, clients*per)
	channels := func() []string { return admin.PubSubChannels(ctx, l.Key()+fifo.ChannelSuffix+"*").Val() }
	waitUntil(t, "both clients' subscriptions", func() bool { return len(channels()) == clients })
	for ch, n := range admin.PubSubNumSub(ctx, channels()...).Val() {
		if n != 1 {
			t.Fatalf("%d subscribers on %s, want 1 (one per client)", n, ch)
		}
	}
	if conns, _ := admin.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text(); strings.Count(conns, "\n") != clients {
		t.Fatalf("Pub/Sub connections:\n%s\nwant %d, one per client", conns, clients)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
