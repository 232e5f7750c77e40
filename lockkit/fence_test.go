package lockkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/goredis"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/faultharness"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

func fencing(ttl time.Duration) Policy {
	return Policy{TTL: ttl, Fencing: true, Retry: Retry{Attempts: 1000, Initial: 2 * time.Millisecond, Max: 25 * time.Millisecond, Multiplier: 1.5, Jitter: 0.5, MaxWait: 5 * time.Second}}
}

// serverMicros is the server's clock, as TIME gives it, in microseconds.
func serverMicros(t *testing.T, rdb redis.Cmdable) int64 {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// acquireFence takes l once, returns its fence and releases it.
func acquireFence(t *testing.T, l Lock) int64 {
	t.Helper()
	lease, err := l.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	return lease.Fence()
}

// A fencing acquisition is still one round trip (one EVALSHA once the script
// is cached), and a domain without fencing has fence 0 and no counter key.
func TestFenceIssuedInOneRoundTrip(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	var mu sync.Mutex
	var sent []string
	rdb.AddHook(commandRecorder(func(name string) {
		mu.Lock()
		sent = append(sent, name)
		mu.Unlock()
	}))
	c, err := New(goredis.New(rdb), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	l := lockOn(testDomain(t, c, Policy{TTL: 10 * time.Second, Fencing: true}), "12")
	first := acquireFence(t, l) // loads the script (EVALSHA, NOSCRIPT, EVAL)

	mu.Lock()
	sent = nil
	mu.Unlock()
	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), sent...)
	mu.Unlock()
	if len(got) != 1 || got[0] != "evalsha" {
		t.Fatalf("a fencing acquisition sent %q, want one evalsha", got)
	}
	if lease.Fence() <= first {
		t.Fatalf("fence %d after %d, want it higher", lease.Fence(), first)
	}
	lease.Release(t.Context())

	plain := lockOn(c.Domain(DomainSpec{Name: "plain", Prefix: "lock:" + t.Name() + ":plain:", Policy: Policy{TTL: time.Second}}), "12")
	if f := acquireFence(t, plain); f != 0 {
		t.Fatalf("a domain without fencing issued fence %d, want 0", f)
	}
	if n := r.Client(t).Exists(t.Context(), plain.Key()+fenceSuffix).Val(); n != 0 {
		t.Fatalf("a domain without fencing created %s", plain.Key()+fenceSuffix)
	}
}

type commandRecorder func(name string)

func (f commandRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f commandRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f(cmd.Name())
		return next(ctx, cmd)
	}
}
func (f commandRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			f(c.Name())
		}
		return next(ctx, cmds)
	}
}

// Two clients (separate pools, like two replicas of a service), four
// goroutines each, take turns on one key: every fence is issued once, they
// increase strictly in the order the lock was held, and they are consecutive
// (one INCR per acquisition). The first one is seeded from the server clock.
func TestFenceIncreasesAcrossClients(t *testing.T) {
	r := testserver.StartRedis(t)
	const clients, goroutines, perG = 2, 4, 25
	before := serverMicros(t, r.Client(t))
	var (
		mu     sync.Mutex
		inHold []int64 // fences in the order their holds ran
		wg     sync.WaitGroup
	)
	errs := make(chan error, clients*goroutines)
	for range clients {
		l := lockOn(testDomain(t, newClient(t, r), fencing(5*time.Second)), "shared")
		for range goroutines {
			wg.Go(func() {
				for range perG {
					err := l.Do(t.Context(), func(_ context.Context, lease *Lease) error {
						mu.Lock()
						inHold = append(inHold, lease.Fence())
						mu.Unlock()
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := serverMicros(t, r.Client(t))
	if len(inHold) != clients*goroutines*perG {
		t.Fatalf("%d holds, want %d", len(inHold), clients*goroutines*perG)
	}
	if f := inHold[0]; f <= before || f > after+1 {
		t.Fatalf("first fence %d, want it seeded from the server clock: in (%d, %d]", f, before, after+1)
	}
	for i := 1; i < len(inHold); i++ {
		if inHold[i] <= inHold[i-1] {
			t.Fatalf("hold %d had fence %d after %d: want strictly increasing fences", i, inHold[i], inHold[i-1])
		}
	}
}

// After a lease expired (its holder stopped renewing), the next acquisition
// gets a higher fence: the counter outlives the lock (it expires
// max(TTL, policy.FenceKeep) after its fence's moment).
func TestFenceIncreasesAfterExpiry(t *testing.T) {
	r := testserver.StartRedis(t)
	// Short, for the lease to expire soon; not shorter: an acquire that
	// takes longer than the TTL (less drift) is refused, and on a loaded
	// machine one took 178 ms.
	p := fencing(time.Second)
	p.Renew = -1
	a := lockOn(testDomain(t, newClient(t, r), p), "12")
	b := lockOn(testDomain(t, newClient(t, r), p), "12")
	la, err := a.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	<-la.Done()
	waitGone(t, r, a.Key())
	if ttl := r.Client(t).PTTL(t.Context(), a.Key()+fenceSuffix).Val(); ttl <= 0 {
		t.Fatalf("fence counter PTTL = %v after the lock expired, want it to outlive the lock", ttl)
	}
	lb, err := b.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(t.Context())
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fence after expiry %d, want > %d", lb.Fence(), la.Fence())
	}
}

// After FLUSHALL the counter is gone; the next fence is seeded from the server
// clock and is above every fence issued before, even after a burst.
func TestFenceIncreasesAfterFlushAll(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	l := lockOn(testDomain(t, newClient(t, r), fencing(time.Second)), "12")
	var last int64
	for range 200 {
		last = acquireFence(t, l)
	}
	if err := rdb.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(t.Context(), l.Key()+fenceSuffix).Val(); n != 0 {
		t.Fatal("the counter survived FLUSHALL")
	}
	before := serverMicros(t, rdb)
	next := acquireFence(t, l)
	after := serverMicros(t, rdb)
	if next <= last {
		t.Fatalf("fence after FLUSHALL %d, want > %d", next, last)
	}
	if next <= before || next > after+1 {
		t.Fatalf("fence after FLUSHALL %d, want it seeded from the server clock: in (%d, %d]", next, before, after+1)
	}
}

// A redis-server without persistence is killed and restarted: every key is
// lost, the counter too, and the next fence is still higher.
func TestFenceIncreasesAfterRestartWithDataLoss(t *testing.T) {
	r := testserver.StartRedis(t)
	l := lockOn(testDomain(t, newClient(t, r), fencing(time.Second)), "12")
	var last int64
	for range 200 {
		last = acquireFence(t, l)
	}
	held, err := l.TryAcquire(t.Context()) // held when the server dies
	if err != nil {
		t.Fatal(err)
	}
	last = held.Fence()
	pid := r.PID()
	r.Kill(t)
	r.Restart(t)
	if r.PID() == pid {
		t.Fatal("Restart kept the old process")
	}
	rdb := r.Client(t)
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Fatalf("%d keys survived the restart, want the data lost", n)
	}
	// A new process, as after a deploy; its scripts are not cached on the new server.
	l2 := lockOn(testDomain(t, newClient(t, r), fencing(time.Second)), "12")
	next := acquireFence(t, l2)
	if next <= last {
		t.Fatalf("fence after a restart with data loss %d, want > %d", next, last)
	}
	t.Logf("fence %d before the restart, %d after (%.1fms of server clock)", last, next, float64(next-last)/1000)
}

// On a real 3-master Redis Cluster, whatever the parameters hold, the lock
// key and its counter hash to one slot: acquisition works through a
// ClusterClient (a CROSSSLOT error otherwise), and CLUSTER KEYSLOT agrees.
// fence.Set works there too.
func TestFenceCounterSharesSlotOnCluster(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	c, err := New(goredis.New(cc), testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	p := Policy{TTL: 10 * time.Second, Fencing: true}
	table := c.Domain(DomainSpec{Name: "table", Policy: p})
	digest := c.Domain(DomainSpec{Name: "user_digest", Policy: p})
	cron := c.Domain(DomainSpec{Name: "cron", Prefix: "app:lock:", Policy: p})
	values := []string{
		"", "12", "{", "}", "{}", "}{", "{{}}", "a{b}c", ":", "a:b", "table:12", "{table:12}",
		"%7B", "%", "日本語", "x\x00y", "\n", strings.Repeat("{", 40), strings.Repeat("}", 40), strings.Repeat("z", 300),
	}
	var locks []Lock
	for i, v := range values {
		locks = append(locks,
			table.Key(6+len(v)).Literal("table:").String(v).Lock(),
			digest.Key(32).Literal("user:").Int(int64(i)-5).Literal(":digest").Lock(),
			cron.Key(16+len(v)).Literal("cron:").String(v).Literal(":").Int(int64(490000+i)).Lock(),
		)
	}
	slots := map[int64]bool{}
	for _, l := range locks {
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("%q: %v", l.Key(), err)
		}
		lockSlot := cc.ClusterKeySlot(t.Context(), l.Key()).Val()
		counterSlot := cc.ClusterKeySlot(t.Context(), l.Key()+fenceSuffix).Val()
		if lockSlot != counterSlot {
			t.Errorf("%q is in slot %d, its counter in slot %d", l.Key(), lockSlot, counterSlot)
		}
		slots[lockSlot] = true
		if n := cc.Exists(t.Context(), l.Key()+fenceSuffix).Val(); n != 1 {
			t.Errorf("%q: no counter key after a fencing acquisition", l.Key())
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if next := acquireFence(t, l); next <= lease.Fence() {
			t.Errorf("%q: fence %d after %d", l.Key(), next, lease.Fence())
		}
		if err := fence.Set(t.Context(), cc, "booking:"+l.Key(), "x", lease.Fence()); err != nil {
			t.Errorf("fence.Set on the cluster: %v", err)
		}
	}
	// The keys spread over the cluster, so the test is not one node's.
	nodes := map[string]bool{}
	for s := range slots {
		for _, r := range cl.Nodes() {
			if n, _ := r.Client(t).ClusterCountKeysInSlot(t.Context(), int(s)).Result(); n > 0 {
				nodes[r.Addr()] = true
			}
		}
	}
	if len(slots) < 10 || len(nodes) < 3 {
		t.Fatalf("the keys fell in %d slots on %d nodes; want them spread over the cluster", len(slots), len(nodes))
	}
}

// The seeds' scenario, with the Redis resource: A acquires (fence n), A is
// paused past its TTL (a paused process renews nothing), B acquires (> n)
// and writes, A wakes and writes with n: fence.ErrFenced, and B's write stands.
func TestFenceScenarioRedis(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	const booking = "booking:table:12"
	const ttl = 500 * time.Millisecond // well above a slow reply on a loaded machine
	pa := fencing(ttl)
	pa.Renew = -1
	// A short TTL needs a command timeout that leaves renewals room.
	a := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), pa), "12")
	b := lockOn(testDomain(t, newClient(t, r, WithCommandTimeout(100*time.Millisecond)), fencing(ttl)), "12")

	la, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := la.Fence()
	paused := time.Now()
	// A is paused: it sends nothing, and its lease runs out meanwhile.
	<-la.Done()
	waitGone(t, r, a.Key())

	lb, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(ctx)
	if lb.Fence() <= n {
		t.Fatalf("B's fence %d, want above A's %d", lb.Fence(), n)
	}
	if err := fence.Set(ctx, rdb, booking, "guest B", lb.Fence()); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	// A wakes up, more than a TTL later, and writes as if it still held the
	// lock. (B may have the key before A's TTL is up on the server: A's
	// client gives its lease back when it counts it lost, at its own
	// deadline, a drift allowance before the server's expiry.)
	if p := time.Since(paused); p < ttl+ttl/10 {
		time.Sleep(ttl + ttl/10 - p)
	}
	err = fence.Set(ctx, rdb, booking, "guest A", n)
	var fe *fence.Error
	if !errors.Is(err, fence.ErrFenced) || !errors.As(err, &fe) || fe.Fence != n || fe.Current != lb.Fence() {
		t.Fatalf("A's stale write = %v, want fence.ErrFenced (fence %d < %d)", err, n, lb.Fence())
	}
	t.Logf("A's write: %v", err)
	if v, f, err := fence.Get(ctx, rdb, booking); err != nil || v != "guest B" || f != lb.Fence() {
		t.Fatalf("booking = %q, fence %d, %v; want B's write", v, f, err)
	}
	if err := la.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A's release = %v, want ErrNotHeld", err)
	}
}

// stressWrite writes value with fence to the resource under test. It returns
// nil when the resource accepted the write, an error matching fence.ErrFenced when
// it turned it away, and any other error on failure.
type stressWrite func(ctx context.Context, value string, fence int64) error

type stressResult struct {
	accepted       map[string]int64 // value → fence, for every accepted write
	rejected       map[string]int64 // value → fence, for every rejected write
	lostAccepted   int              // accepted although the writer's lease was already lost
	holds, gaveUp  int
	unavailable    int // acquisitions refused as ErrUnavailable
	longPauses     int
	leasesLost     int
	distinctFences int
}

// runFencingStress runs 4 clients × 16 goroutines on one lock key: each
// goroutine acquires, sleeps a random pause (some 2-3× the TTL), then writes
// once or twice through write with its lease's fence, and releases. Clients 0
// and 2 do not renew, so their long pauses lose the lease and another
// goroutine takes the lock meanwhile, as when a process is paused; 1 and 3
// renew, so theirs only hold the lock longer. Bounded: at most 10 holds a
// goroutine, and 7s.
func runFencingStress(t *testing.T, r *testserver.Redis, write stressWrite) stressResult {
	t.Helper()
	const (
		clients, goroutines, maxHolds = 4, 16, 10
		ttl                           = 150 * time.Millisecond
	)
	ctx, cancel := context.WithTimeout(t.Context(), 7*time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		res    = stressResult{accepted: map[string]int64{}, rejected: map[string]int64{}}
		issued = map[int64]string{} // fence → lease token
		wg     sync.WaitGroup
	)
	// fail records an error without ever blocking: a goroutine keeps going
	// (bounded anyway), and the test reports the first errors at the end.
	var failures []error
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	var seed atomic.Uint64
	for ci := range clients {
		p := fencing(ttl)
		p.Retry.MaxWait = 2 * time.Second
		if ci%2 == 0 {
			p.Renew = -1
		} else {
			p.Renew = 40 * time.Millisecond // room for the drift and the 100ms command timeout
		}
		// Lost leases are counted, not logged: there are dozens. A pool as
		// large as the goroutines, so no command waits for a connection,
		// and a breaker that load alone does not trip: this test is about
		// fences (the breaker has its own fault tests).
		rdb := r.Client(t, func(o *redis.Options) { o.PoolSize = 2 * goroutines })
		c := newClientOver(t, rdb, WithLogger(slog.New(slog.DiscardHandler)), WithCommandTimeout(100*time.Millisecond),
			WithBreaker(breaker.Settings{ConsecutiveFailures: 1 << 20}))
		l := lockOn(testDomain(t, c, p), "stress")
		for range goroutines {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), seed.Add(1)))
			wg.Go(func() {
				for range maxHolds {
					lease, err := l.Acquire(ctx)
					switch {
					case ctx.Err() != nil:
						return
					case errors.Is(err, ErrNotAcquired):
						mu.Lock()
						res.gaveUp++
						mu.Unlock()
						continue
					case errors.Is(err, ErrUnavailable):
						// A reply slower than the TTL (a loaded machine) is
						// refused by the runtime, not made a lease: count it.
						mu.Lock()
						res.unavailable++
						mu.Unlock()
						continue
					case err != nil:
						fail(err)
						return
					}
					mu.Lock()
					res.holds++
					if tok, dup := issued[lease.Fence()]; dup {
						failures = append(failures, fmt.Errorf("fence %d issued to two leases (%s, %s)", lease.Fence(), tok, lease.Token()))
					}
					issued[lease.Fence()] = lease.Token()
					mu.Unlock()

					var pause time.Duration
					long := false
					switch x := rng.IntN(100); {
					case x < 15:
						pause, long = 2*ttl+time.Duration(rng.Int64N(int64(ttl))), true
					case x < 35:
						pause = 5*time.Millisecond + time.Duration(rng.Int64N(int64(35*time.Millisecond)))
					default:
						pause = time.Duration(rng.Int64N(int64(2 * time.Millisecond)))
					}
					time.Sleep(pause)

					writes := 1 + rng.IntN(4)/3 // a quarter write twice under one lease
					for w := range writes {
						value := fmt.Sprintf("%s/%d", lease.Token(), w)
						wctx, wcancel := context.WithTimeout(t.Context(), 5*time.Second)
						lost := lease.Err() != nil
						err := write(wctx, value, lease.Fence())
						wcancel()
						mu.Lock()
						var fe *fence.Error
						switch {
						case err == nil:
							res.accepted[value] = lease.Fence()
							if lost {
								res.lostAccepted++
							}
						case errors.As(err, &fe) && errors.Is(err, fence.ErrFenced):
							res.rejected[value] = lease.Fence()
							if fe.Fence != lease.Fence() || fe.Current <= fe.Fence {
								failures = append(failures, fmt.Errorf("rejection %+v for fence %d: the resource's fence must be above it", fe, lease.Fence()))
							}
						default:
							failures = append(failures, fmt.Errorf("write: %w", err))
						}
						mu.Unlock()
					}
					// A release that times out on a loaded machine leaves the key
					// to its TTL: slower, not wrong.
					if err := lease.Release(t.Context()); err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrUnavailable) {
						fail(err)
					}
					mu.Lock()
					if long {
						res.longPauses++
					}
					if lease.Err() != nil {
						res.leasesLost++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for i, err := range failures {
		if i == 10 {
			t.Fatalf("… and %d more errors", len(failures)-i)
		}
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	res.distinctFences = len(issued)
	return res
}

type historyEntry struct {
	value string
	fence int64
}

// checkHistory checks the resource's own record of the writes it applied, in
// the order it applied them, against what the writers saw: every accepted
// write is there once, no rejected one is, and no fence is lower than one
// accepted before it.
func checkHistory(t *testing.T, res stressResult, history []historyEntry) {
	t.Helper()
	outOfOrder := 0
	var highest int64
	seen := map[string]bool{}
	for i, h := range history {
		if h.fence < highest {
			outOfOrder++
			t.Errorf("history entry %d: fence %d accepted after fence %d", i, h.fence, highest)
		}
		highest = max(highest, h.fence)
		f, ok := res.accepted[h.value]
		switch {
		case !ok && res.rejected[h.value] != 0:
			t.Errorf("history entry %d: %q was reported rejected, but the resource applied it", i, h.value)
		case !ok:
			t.Errorf("history entry %d: %q is no write of this test", i, h.value)
		case f != h.fence:
			t.Errorf("history entry %d: %q applied with fence %d, written with %d", i, h.value, h.fence, f)
		case seen[h.value]:
			t.Errorf("history entry %d: %q applied twice", i, h.value)
		}
		seen[h.value] = true
	}
	if len(history) != len(res.accepted) {
		t.Errorf("the resource's history has %d writes; the writers saw %d accepted", len(history), len(res.accepted))
	}
	t.Logf("holds %d (fences %d, gave up %d, unavailable %d), long pauses %d, leases lost %d; writes accepted %d (%d of them after the lease was lost, before a newer holder wrote), rejected %d; out of order in the resource's history: %d",
		res.holds, res.distinctFences, res.gaveUp, res.unavailable, res.longPauses, res.leasesLost, len(res.accepted), res.lostAccepted, len(res.rejected), outOfOrder)
	if len(res.accepted) == 0 || len(res.rejected) == 0 {
		t.Errorf("accepted %d, rejected %d: the stress did not exercise both outcomes", len(res.accepted), len(res.rejected))
	}
}

// The stress test with the Redis resource. The history is the server's own:
// its append-only file (appendfsync always, rewrites off), where each
// accepted fence.Set appears as the script's effect, an HSET with the fence.
func TestFencedStressRedis(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithAppendOnly(), testserver.WithArgs("--auto-aof-rewrite-percentage", "0", "--aof-use-rdb-preamble", "no"))
	rdb := r.Client(t)
	const booking = "booking:stress"
	res := runFencingStress(t, r, func(ctx context.Context, value string, fenceNo int64) error {
		return fence.Set(ctx, rdb, booking, value, fenceNo)
	})
	history := aofHistory(t, r.Dir(), booking)
	checkHistory(t, res, history)
	if _, f, err := fence.Get(t.Context(), rdb, booking); err != nil || f != history[len(history)-1].fence {
		t.Fatalf("fence.Get = fence %d, %v; the AOF's last write has %d", f, err, history[len(history)-1].fence)
	}
}

// aofHistory reads a redis-server's multi-part append-only file (Redis 7:
// appendonlydir/, a manifest naming a base file and incremental files) and
// returns every HSET of key's "value" and "fence" fields, in file order (base
// file included, so a rewrite loses nothing).
func aofHistory(t *testing.T, dir, key string) []historyEntry {
	t.Helper()
	// The harness's reader: one parser of Redis's AOF in the repository.
	cmds, err := faultharness.ReadAOF(filepath.Join(dir, "appendonlydir"))
	if err != nil {
		t.Fatalf("reading the AOF: %v", err)
	}
	writes, err := faultharness.WritesFromAOF(cmds, key)
	if err != nil {
		t.Fatal(err)
	}
	history := make([]historyEntry, len(writes))
	for i, w := range writes {
		history[i] = historyEntry{value: w.Value, fence: w.Fence}
	}
	return history
}
