package lockkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// commandCounter counts the commands a go-redis client sends: a single
// command is one round trip.
type commandCounter struct{ n atomic.Int64 }

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// calls is how many times the servers ran command since their last CONFIG
// RESETSTAT (INFO commandstats; commands a script runs are counted too).
func calls(t *testing.T, command string, servers ...*testserver.Redis) int {
	t.Helper()
	total := 0
	for _, r := range servers {
		stat, ok := r.Info(t, "commandstats")["cmdstat_"+command]
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("cmdstat_%s: %q", command, stat)
		}
		total += n
	}
	return total
}

// loadScripts loads the runtime's scripts into a server, so that no
// EVALSHA meets NOSCRIPT (a lost NOSCRIPT reply would leave nothing to test).
func loadScripts(t *testing.T, rdb *redis.Client) {
	t.Helper()
	for _, s := range []*redis.Script{rediswire.AcquireScript, rediswire.AcquireAllScript, rediswire.ReleaseScript, rediswire.ExtendScript} {
		if err := s.Load(t.Context(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func resetStats(t *testing.T, servers ...*testserver.Redis) {
	t.Helper()
	for _, r := range servers {
		if err := r.Client(t).ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// On one Redis server, a set of three locks of two domains (one fenced, with
// its own TTL) is taken by one script in one round trip: each key holds its
// lease's token, with its own domain's TTL; the fenced keys get fences, the
// other none and no counter.
func TestDoAllBatchOneScript(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	count := &commandCounter{}
	rdb.AddHook(count)
	if err := rediswire.AcquireAllScript.Load(t.Context(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClientOver(t, rdb)
	fenced := testDomain(t, c, Policy{TTL: 10 * time.Second, Fencing: true})
	short := c.Domain(DomainSpec{Name: "short", Prefix: "lock:" + t.Name() + ":short:", Policy: Policy{TTL: 2 * time.Second}})
	a, b, s := lockOn(fenced, "a"), lockOn(fenced, "b"), lockOn(short, "s")
	if batcherFor([]Lock{a, b, s}) == nil {
		t.Fatal("a set on one server is not batched")
	}
	direct := r.Client(t)
	resetStats(t, r)
	count.n.Store(0)
	err := DoAll(t.Context(), func(ctx context.Context, set *LeaseSet) error {
		if n := count.n.Load(); n != 1 {
			return fmt.Errorf("the acquisition sent %d commands, want 1", n)
		}
		if n, m := calls(t, "evalsha", r), calls(t, "eval", r); n != 1 || m != 0 {
			return fmt.Errorf("the server ran %d EVALSHA and %d EVAL, want one EVALSHA", n, m)
		}
		for _, l := range []Lock{a, b, s} {
			lease := set.Lease(l)
			if v := direct.Get(ctx, l.Key()).Val(); lease == nil || !holder.Owns(v, lease.Token()) {
				return fmt.Errorf("%s holds %q, not its lease's token", l.Key(), v)
			}
		}
		if pa, ps := direct.PTTL(ctx, a.Key()).Val(), direct.PTTL(ctx, s.Key()).Val(); pa <= 2*time.Second || ps > 2*time.Second || ps <= 0 {
			return fmt.Errorf("PTTL %v for a 10s lock and %v for a 2s lock", pa, ps)
		}
		if set.Fence(a) <= 0 || set.Fence(b) <= 0 || set.Fence(s) != 0 {
			return fmt.Errorf("fences %d, %d (fenced) and %d (not fenced)", set.Fence(a), set.Fence(b), set.Fence(s))
		}
		if n := direct.Exists(ctx, s.Key()+fenceSuffix).Val(); n != 0 {
			return errors.New("the lock without fencing got a fence counter")
		}
		return nil
	}, s, b, a)
	if err != nil {
		t.Fatal(err)
	}
	if n := direct.Exists(t.Context(), a.Key(), b.Key(), s.Key()).Val(); n != 0 {
		t.Fatalf("%d keys left after DoAll", n)
	}
}

// When one key of a same-server set is held by another owner, the one
// script takes none of them: it checks every key before it writes any, so
// the server ran no SET and needed no rollback (no release script); one
// command went out. A retrying DoAll then takes the set once it is free.
func TestDoAllBatchTakesNoneWhenOneIsHeld(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	count := &commandCounter{}
	rdb.AddHook(count)
	if err := rediswire.AcquireAllScript.Load(t.Context(), rdb).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClientOver(t, rdb)
	d := testDomain(t, c, Policy{TTL: 5 * time.Second, Retry: Retry{Attempts: 1 << 20, Initial: time.Millisecond, Max: 10 * time.Millisecond, MaxWait: 30 * time.Second}})
	other := testDomain(t, newClient(t, r), Policy{TTL: 5 * time.Second, Renew: -1})
	a, b, z := lockOn(d, "a"), lockOn(d, "b"), lockOn(d, "z") // "z" sorts last
	held, err := lockOn(other, "z").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	direct := r.Client(t)
	resetStats(t, r)
	count.n.Store(0)
	ran := false
	err = TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { ran = true; return nil }, z, b, a)
	if !errors.Is(err, ErrNotAcquired) || ran {
		t.Fatalf("TryDoAll with its last key held = %v (fn ran: %v), want the bare ErrNotAcquired", err, ran)
	}
	if n := direct.Exists(t.Context(), a.Key(), b.Key()).Val(); n != 0 {
		t.Fatalf("%d of the free keys are held after the set was refused", n)
	}
	if v := direct.Get(t.Context(), z.Key()).Val(); !holder.Owns(v, held.Token()) {
		t.Fatalf("the held key now holds %q", v)
	}
	if n := count.n.Load(); n != 1 {
		t.Fatalf("the refused attempt sent %d commands, want 1 (one script)", n)
	}
	if ev, set, ex := calls(t, "evalsha", r), calls(t, "set", r), calls(t, "exists", r); ev != 1 || set != 0 || ex == 0 {
		t.Fatalf("the server ran EVALSHA %d, SET %d, EXISTS %d times; want one script that wrote nothing", ev, set, ex)
	}
	c.mu.Lock()
	tracked := len(c.leases)
	c.mu.Unlock()
	if tracked != 0 {
		t.Fatalf("the client tracks %d leases after a refused set", tracked)
	}

	// Retried as a whole: the set is taken once the held key is free.
	done := make(chan error, 1)
	go func() {
		done <- DoAll(t.Context(), func(ctx context.Context, set *LeaseSet) error {
			if len(set.Leases()) != 3 {
				return fmt.Errorf("%d leases", len(set.Leases()))
			}
			return nil
		}, a, b, z)
	}()
	pollFor(t, 10*time.Second, "a refused attempt of the retrying DoAll", func() bool { return calls(t, "evalsha", r) >= 2 })
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("DoAll after the key was freed: %v", err)
	}
}

// Each fenced key of a batched set gets the next fence of its own counter:
// with the counters set far apart (above the server clock in µs, so the
// counters decide), each fence is its own counter + 1, whatever order the
// locks are passed in, and keeps increasing per key across sets and single
// acquisitions, which share the counter.
func TestDoAllBatchFencesPerKey(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	d := testDomain(t, c, Policy{TTL: 5 * time.Second, Fencing: true})
	a, b := lockOn(d, "a"), lockOn(d, "b")
	rdb := r.Client(t)
	const seedA, seedB = int64(1) << 52, int64(1)<<52 + 1000
	rdb.Set(t.Context(), a.Key()+fenceSuffix, seedA, 0)
	rdb.Set(t.Context(), b.Key()+fenceSuffix, seedB, 0)
	wantA, wantB := seedA, seedB
	for i := range 4 {
		given := []Locker{a, b}
		if i%2 == 1 {
			given = []Locker{b, a}
		}
		wantA, wantB = wantA+1, wantB+1
		err := DoAll(t.Context(), func(_ context.Context, s *LeaseSet) error {
			if s.Fence(a) != wantA || s.Fence(b) != wantB {
				return fmt.Errorf("set %d: fences %d and %d, want %d and %d", i, s.Fence(a), s.Fence(b), wantA, wantB)
			}
			return nil
		}, given...)
		if err != nil {
			t.Fatal(err)
		}
		lease, err := a.TryAcquire(t.Context()) // the single path shares a's counter
		if err != nil {
			t.Fatal(err)
		}
		if wantA++; lease.Fence() != wantA {
			t.Fatalf("single acquisition after set %d: fence %d, want %d", i, lease.Fence(), wantA)
		}
		_ = lease.Release(t.Context())
	}

	// Unseeded counters (the clock decides): strictly increasing per key,
	// each the value its own counter holds.
	x, y := lockOn(d, "x"), lockOn(d, "y")
	var lastX, lastY int64
	for i := range 5 {
		err := DoAll(t.Context(), func(ctx context.Context, s *LeaseSet) error {
			fx, fy := s.Fence(x), s.Fence(y)
			if fx <= lastX || fy <= lastY {
				return fmt.Errorf("set %d: fences %d, %d after %d, %d", i, fx, fy, lastX, lastY)
			}
			cx, _ := rdb.Get(ctx, x.Key()+fenceSuffix).Int64()
			cy, _ := rdb.Get(ctx, y.Key()+fenceSuffix).Int64()
			if cx != fx || cy != fy {
				return fmt.Errorf("set %d: fences %d, %d but counters %d, %d", i, fx, fy, cx, cy)
			}
			lastX, lastY = fx, fy
			return nil
		}, x, y)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Sentinel's failover client talks to one master: a set is taken there by
// one script.
func TestDoAllBatchSentinel(t *testing.T) {
	primary := testserver.StartRedis(t)
	sentinel := testserver.StartSentinel(t, primary, "locks", 1)
	c := newClientOver(t, sentinel.FailoverClient(t))
	d := testDomain(t, c, Policy{TTL: 5 * time.Second, Fencing: true})
	a, b := lockOn(d, "a"), lockOn(d, "b")
	if batcherFor([]Lock{a, b}) == nil {
		t.Fatal("a set over Sentinel's failover client is not batched")
	}
	loadScripts(t, primary.Client(t))
	resetStats(t, primary)
	err := DoAll(t.Context(), func(context.Context, *LeaseSet) error {
		if n := calls(t, "evalsha", primary); n != 1 {
			return fmt.Errorf("the master ran %d scripts for the set, want 1", n)
		}
		return nil
	}, a, b)
	if err != nil {
		t.Fatal(err)
	}
}

// A batched set with a lock that waits for replicas: one script and one
// WAIT; by the time fn runs the replica holds every key of the set, the
// lock without Replicas included. When too few replicas acknowledge, the set
// fails as unavailable and no key stays on the primary.
func TestDoAllBatchWaitsForReplicas(t *testing.T) {
	primary := testserver.StartRedis(t)
	replica := testserver.StartReplica(t, primary)
	replicasInSync(t, primary, 1)
	loadScripts(t, primary.Client(t))
	c := newClient(t, primary)
	plain := testDomain(t, c, Policy{TTL: 5 * time.Second, Fencing: true})
	one := c.Domain(DomainSpec{Name: "one", Prefix: "lock:" + t.Name() + ":one:", Policy: replicaPolicy()})
	two := c.Domain(DomainSpec{Name: "two", Prefix: "lock:" + t.Name() + ":two:", Policy: Policy{TTL: 5 * time.Second, Replicas: 2, ReplicaTimeout: 50 * time.Millisecond}})
	a, r1, r2 := lockOn(plain, "a"), lockOn(one, "r"), lockOn(two, "r")
	if batcherFor([]Lock{a, r1}) == nil {
		t.Fatal("a set with a replicated lock is not batched")
	}
	onReplica := replica.Client(t)
	resetStats(t, primary)
	err := DoAll(t.Context(), func(ctx context.Context, s *LeaseSet) error {
		if ev, w := calls(t, "evalsha", primary), calls(t, "wait", primary); ev != 1 || w != 1 {
			return fmt.Errorf("the primary ran %d scripts and %d WAITs, want 1 and 1", ev, w)
		}
		for _, l := range []Lock{a, r1} {
			if v := onReplica.Get(ctx, l.Key()).Val(); !holder.Owns(v, s.Lease(l).Token()) {
				return fmt.Errorf("the replica has %q at %s", v, l.Key())
			}
		}
		return nil
	}, r1, a)
	if err != nil {
		t.Fatal(err)
	}

	err = TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, a, r2)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, rediswire.ErrReplicas) || !strings.Contains(err.Error(), "1 of 2 within 50ms; the locks of the set were released") {
		t.Fatalf("TryDoAll needing 2 replicas of 1 = %v, want ErrUnavailable for too few replicas", err)
	}
	if n := primary.Client(t).Exists(t.Context(), a.Key(), r2.Key()).Val(); n != 0 {
		t.Fatalf("%d keys of the refused set left on the primary", n)
	}
}

// clusterSlot is the server's CLUSTER KEYSLOT, hash tags and odd keys
// included.
func TestClusterSlotMatchesServer(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	rdb := r.Client(t)
	d := testDomain(t, newClientOver(t, fakeUniversal(t)), Policy{TTL: time.Second})
	keys := []string{"", "a", "{", "}", "{}", "{}a", "a{}b{c}", "a{b}c", "{b}", "{{b}}", "x{y", "123456789", "foo{bar}{zap}", "ключ{锁}"}
	for _, id := range []string{"", "{", "}", "a{b}c", "%7B", "🔒}:{", "tab\tnl\n"} {
		keys = append(keys, lockOn(d, id).Key())
	}
	for i := range 300 {
		keys = append(keys, lockOn(d, strconv.Itoa(i)).Key())
	}
	for _, k := range keys {
		want, err := rdb.ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := policy.ClusterSlot(k); int64(got) != want {
			t.Fatalf("ClusterSlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// On a Cluster, a set whose keys share a hash slot is taken by one script on
// that slot's master; a set across slots is taken one by one (plain SET NX,
// no script), and both work.
func TestDoAllClusterBatchOnlyInOneSlot(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	d := testDomain(t, newClientOver(t, cc), Policy{TTL: 5 * time.Second})
	// Two keys in one slot: lock keys whose whole suffix is the hash tag
	// share a slot only when their tags collide, so look for a pair.
	bySlot := map[int]Lock{}
	var same []Lock
	for i := 0; same == nil; i++ {
		if i > 100000 {
			t.Fatal("no two keys in one slot")
		}
		l := lockOn(d, strconv.Itoa(i))
		slot := policy.ClusterSlot(l.Key())
		if prev, ok := bySlot[slot]; ok {
			same = []Lock{prev, l}
		}
		bySlot[slot] = l
	}
	s0, _ := cc.ClusterKeySlot(t.Context(), same[0].Key()).Result()
	s1, _ := cc.ClusterKeySlot(t.Context(), same[1].Key()).Result()
	if s0 != s1 {
		t.Fatalf("the server puts %s and %s in slots %d and %d", same[0].Key(), same[1].Key(), s0, s1)
	}
	across := []Lock{lockOn(d, "p"), lockOn(d, "q")}
	if policy.ClusterSlot(across[0].Key()) == policy.ClusterSlot(across[1].Key()) {
		t.Fatal("p and q share a slot; pick other ids")
	}
	if batcherFor(same) == nil || batcherFor(across) != nil {
		t.Fatalf("batched: one slot %v, across slots %v; want only the first", batcherFor(same) != nil, batcherFor(across) != nil)
	}
	nodes := cl.Nodes()
	for _, n := range nodes {
		loadScripts(t, n.Client(t))
	}
	for _, tc := range []struct {
		name            string
		set             []Lock
		evalsha, setnxs int
	}{
		{"one slot", same, 1, 2},       // the script's two SETs
		{"across slots", across, 0, 2}, // two SET NX, no script
	} {
		resetStats(t, nodes...)
		err := DoAll(t.Context(), func(ctx context.Context, s *LeaseSet) error {
			if ev, set := calls(t, "evalsha", nodes...)+calls(t, "eval", nodes...), calls(t, "set", nodes...); ev != tc.evalsha || set != tc.setnxs {
				return fmt.Errorf("the nodes ran %d scripts and %d SETs, want %d and %d", ev, set, tc.evalsha, tc.setnxs)
			}
			for _, l := range tc.set {
				if v := cc.Get(ctx, l.Key()).Val(); !holder.Owns(v, s.Lease(l).Token()) {
					return fmt.Errorf("%s holds %q", l.Key(), v)
				}
			}
			return nil
		}, tc.set[1], tc.set[0])
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.evalsha == 1 {
			// The script went through the breaker of its slot's master.
			master := clusterMasterOf(t, cc, tc.set[0].Key())
			names := []string{}
			for _, b := range d.c.breakers() {
				names = append(names, b.Name())
			}
			if len(names) != 1 || names[0] != master {
				t.Fatalf("breakers %v after the batched set, want only %s's", names, master)
			}
		}
	}

	// One by one, the later key held: the earlier one was taken (its master
	// ran the SET) and given back before TryDoAll returned.
	other := testDomain(t, newClientOver(t, cl.Client(t)), Policy{TTL: 5 * time.Second})
	held, err := lockOn(other, "q").TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(t.Context())
	resetStats(t, nodes...)
	err = TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, across[1], across[0])
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryDoAll across slots with the later key held = %v, want ErrNotAcquired", err)
	}
	if n := calls(t, "set", nodes...); n != 2 {
		t.Fatalf("the nodes ran %d SETs, want 2 (the earlier key taken, the later refused)", n)
	}
	if n := cc.Exists(t.Context(), across[0].Key()).Val(); n != 0 {
		t.Fatal("the earlier key stayed held after the later one was refused")
	}
}

// startProxy runs an in-process toxiproxy on a free loopback port in front
// of upstream and returns it with its address.
func startProxy(t *testing.T, upstream string) (*toxiproxy.Proxy, string) {
	t.Helper()
	p := startToxiproxy(t, upstream)
	return p, p.Listen
}

// warmPool makes n connections of rdb ready (HELLO answered) and idle, by
// holding n of them at once in a short BLPOP: a connection made after a
// toxic would wait for its HELLO reply, and its command never reach the
// server. go-redis dials MinIdleConns without that handshake.
func warmPool(t *testing.T, rdb redis.UniversalClient, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := rdb.Do(t.Context(), "blpop", "warm:{"+strconv.Itoa(i)+"}", "0.1").Err(); err != redis.Nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// addToxic adds a toxic to every connection through proxy.
func addToxic(t *testing.T, proxy *toxiproxy.Proxy, name, typ, stream string, attrs string) {
	t.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("toxiproxy: add %s: %v", name, err)
	}
}

// A partial acquisition across Cluster slots is rolled back when the later
// key's master stops answering (toxiproxy between the client and that master
// only): the earlier key is given back before TryDoAll returns. With the
// requests cut off (timeout toxic upstream) the later key was never taken;
// with the replies cut off (latency beyond the command timeout, downstream)
// the master did take it, and the background release that follows a lost
// reply frees it well before its TTL.
func TestDoAllClusterRollbackWhenLaterMasterStopsAnswering(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	seed := cl.Client(t)
	d0 := testDomain(t, newClientOver(t, seed), Policy{TTL: 30 * time.Second})
	var firstID, secondID string // in canonical order, on two masters
	for i := 0; secondID == ""; i++ {
		id := "k" + strconv.Itoa(i)
		switch {
		case firstID == "":
			firstID = id
		case clusterMasterOf(t, seed, lockOn(d0, id).Key()) != clusterMasterOf(t, seed, lockOn(d0, firstID).Key()):
			secondID = id
		}
	}
	if lockOn(d0, firstID).Key() > lockOn(d0, secondID).Key() {
		firstID, secondID = secondID, firstID
	}
	first, second := lockOn(d0, firstID), lockOn(d0, secondID)
	firstMaster, secondMaster := clusterMasterOf(t, seed, first.Key()), clusterMasterOf(t, seed, second.Key())
	direct := map[string]*redis.Client{}
	var secondNode *testserver.Redis
	for _, n := range cl.Nodes() {
		direct[n.Addr()] = n.Client(t)
		if n.Addr() == secondMaster {
			secondNode = n
		}
	}
	for _, n := range direct {
		loadScripts(t, n)
	}
	proxy, proxyAddr := startProxy(t, secondMaster)
	// The client reaches secondMaster through the proxy: the slot map names
	// the real address, the dialer swaps it.
	cc := cl.Client(t, func(o *redis.ClusterOptions) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == secondMaster {
				addr = proxyAddr
			}
			var dl net.Dialer
			return dl.DialContext(ctx, network, addr)
		}
	})
	c := newClientOver(t, cc, WithCommandTimeout(200*time.Millisecond), WithBreaker(breaker.Settings{ConsecutiveFailures: 100}))
	d := testDomain(t, c, Policy{TTL: 30 * time.Second})
	first, second = lockOn(d, firstID), lockOn(d, secondID) // same keys, on the proxied client
	if batcherFor([]Lock{first, second}) != nil {
		t.Fatal("a set across slots is batched")
	}
	noop := func(context.Context, *LeaseSet) error { return nil }
	if err := TryDoAll(t.Context(), noop, first, second); err != nil {
		t.Fatalf("through the proxy, before any toxic: %v", err)
	}
	warmPool(t, cc, 3*16) // keys spread over the masters: 16 each, or so
	for _, tc := range []struct {
		name, typ, stream, attrs string
		laterTaken               bool
	}{
		{"replies too late", "latency", "downstream", `{"latency":1000}`, true},
		{"requests cut off", "timeout", "upstream", `{"timeout":0}`, false},
	} {
		resetStats(t, secondNode)
		addToxic(t, proxy, tc.name, tc.typ, tc.stream, tc.attrs)
		err := TryDoAll(t.Context(), noop, second, first)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: TryDoAll = %v, want ErrUnavailable", tc.name, err)
		}
		if n := direct[firstMaster].Exists(t.Context(), first.Key()).Val(); n != 0 {
			t.Fatalf("%s: the earlier key stayed held after the set failed", tc.name)
		}
		if tc.laterTaken {
			// The release may land before a GET could see the key: the
			// master's own count says that it ran the SET.
			if n := calls(t, "set", secondNode); n == 0 {
				t.Fatalf("%s: the later key's master ran no SET: nothing to test", tc.name)
			}
			// The release goes out behind the acquire on another pooled
			// connection; only the reply path is slow, so it lands.
			pollFor(t, 10*time.Second, tc.name+": the later key released", func() bool {
				return direct[secondMaster].Exists(t.Context(), second.Key()).Val() == 0
			})
		} else if n := direct[secondMaster].Exists(t.Context(), second.Key()).Val(); n != 0 {
			t.Fatalf("%s: the later key is held though no request reached its master", tc.name)
		}
		if err := proxy.Toxics.RemoveToxic(t.Context(), tc.name); err != nil {
			t.Fatal(err)
		}
	}
}

// A batched set whose reply is lost (the server ran the script, the reply
// comes after the command timeout) is ErrUnavailable and released whole by
// the background release that follows, well before the TTL. The attempt
// goes through the node's breaker: once open, a set is refused without a
// command being sent.
func TestDoAllBatchLostReply(t *testing.T) {
	r := testserver.StartRedis(t)
	proxy, addr := startProxy(t, r.Addr())
	// Connections made before the toxic: a new one would wait for its
	// HELLO reply, and its command would never reach the server.
	rdb := r.Client(t, func(o *redis.Options) { o.Addr = addr })
	warmPool(t, rdb, 8)
	var opened atomic.Bool
	c := newClientOver(t, rdb, WithCommandTimeout(200*time.Millisecond), WithBreaker(breaker.Settings{
		ConsecutiveFailures: 1, OpenTimeout: time.Minute,
		OnStateChange: func(_ string, _, to breaker.State) { opened.Store(to == breaker.StateOpen) },
	}))
	d := testDomain(t, c, Policy{TTL: 30 * time.Second, Fencing: true})
	a, b := lockOn(d, "a"), lockOn(d, "b")
	if batcherFor([]Lock{a, b}) == nil {
		t.Fatal("not batched")
	}
	direct := r.Client(t)
	loadScripts(t, direct)
	resetStats(t, r)
	addToxic(t, proxy, "late", "latency", "downstream", `{"latency":1000}`)
	starved0 := circuit.StarvedTimeouts()
	err := TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, a, b)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TryDoAll with the reply lost = %v, want ErrUnavailable", err)
	}
	// The release may land before a GET could see the keys: the server's
	// own count says that the script wrote them.
	if n := calls(t, "set", r); n < 2 { // and the fence counters' SETs
		t.Fatalf("the server ran %d SETs, want at least the script's 2: nothing to test", n)
	}
	pollFor(t, 10*time.Second, "both keys released", func() bool {
		return direct.Exists(t.Context(), a.Key(), b.Key()).Val() == 0
	})
	// A timeout the breaker ignored as this process's own starvation (a
	// loaded machine) is not counted: one more failed set for each.
	for i := 0; !opened.Load(); i++ {
		if ignored := int(circuit.StarvedTimeouts() - starved0); i >= ignored {
			t.Fatalf("the failed set did not count against the node's breaker (%d timeouts ignored as starvation)", ignored)
		}
		if err := TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, a, b); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryDoAll with the reply lost, again = %v, want ErrUnavailable", err)
		}
	}
	if err := proxy.Toxics.RemoveToxic(t.Context(), "late"); err != nil {
		t.Fatal(err)
	}
	resetStats(t, r)
	err = TryDoAll(t.Context(), func(context.Context, *LeaseSet) error { return nil }, a, b)
	if !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TryDoAll with the breaker open = %v, want ErrUnavailable and breaker.ErrOpen", err)
	}
	if n := calls(t, "evalsha", r) + calls(t, "eval", r); n != 0 {
		t.Fatalf("the open breaker let %d scripts through: %v", n, r.Info(t, "commandstats"))
	}
}
