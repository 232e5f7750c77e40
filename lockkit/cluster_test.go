package lockkit

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// clusterMasterOf is the address of the master that owns key's slot.
func clusterMasterOf(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := cc.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// Locks on keys spread over all three masters: each is granted, lives on
// the master that owns its slot, is contended there, and is released; the
// client keeps one breaker per master.
func TestClusterSpread(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	c := newClientOver(t, cc)
	d := testDomain(t, c, Policy{TTL: 5 * time.Second})
	other := testDomain(t, newClientOver(t, cl.Client(t)), Policy{TTL: 5 * time.Second})
	direct := map[string]*redis.Client{}
	for _, n := range cl.Nodes() {
		direct[n.Addr()] = n.Client(t)
	}

	perMaster := map[string]int{}
	for i := 0; ; i++ {
		if i > 2000 {
			t.Fatalf("keys reached only %v", perMaster)
		}
		done := len(perMaster) == 3
		for _, n := range perMaster {
			done = done && n >= 5
		}
		if done {
			break
		}
		id := "spread-" + strconv.Itoa(i)
		l := lockOn(d, id)
		master := clusterMasterOf(t, cc, l.Key())
		if perMaster[master] >= 5 {
			continue
		}
		perMaster[master]++
		lease, err := l.TryAcquire(t.Context())
		if err != nil {
			t.Fatalf("%s on %s: %v", l.Key(), master, err)
		}
		if got := direct[master].Get(t.Context(), l.Key()).Val(); !holder.Owns(got, lease.Token()) {
			t.Fatalf("%s: master %s holds %q, want the lease's token", l.Key(), master, got)
		}
		if _, err := lockOn(other, id).TryAcquire(t.Context()); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("%s: contender got %v, want ErrNotAcquired", l.Key(), err)
		}
		if err := lease.Extend(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := direct[master].Exists(t.Context(), l.Key()).Val(); n != 0 {
			t.Fatalf("%s still on %s after release", l.Key(), master)
		}
	}
	names := map[string]bool{}
	for _, b := range c.breakers() {
		names[b.Name()] = true
	}
	for m := range perMaster {
		if !names[m] {
			t.Fatalf("no breaker for master %s (breakers %v)", m, names)
		}
	}
}

// A lock key and its fence counter share a hash slot whatever the id holds
// ('{', '}', ':', '%', unicode, empty), so the fenced acquire script (two
// keys) never fails with CROSSSLOT, and fences increase on every master.
func TestClusterFenceSameSlot(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	d := testDomain(t, newClientOver(t, cc), Policy{TTL: 5 * time.Second, Fencing: true})
	ids := []string{"", "{", "}", "{}", "}{", "a{b}c", "{a}:{b}", ":", "::fence", "x:fence}", "%7B", "ключ", "锁{", "🔒}:{", "{{{}}}", "tab\tnl\n"}
	masters := map[string]bool{}
	for _, id := range ids {
		l := lockOn(d, id)
		slot, err := cc.ClusterKeySlot(t.Context(), l.Key()).Result()
		if err != nil {
			t.Fatal(err)
		}
		fslot, err := cc.ClusterKeySlot(t.Context(), l.Key()+fenceSuffix).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot != fslot {
			t.Fatalf("id %q: lock key %q in slot %d, fence counter in slot %d", id, l.Key(), slot, fslot)
		}
		masters[clusterMasterOf(t, cc, l.Key())] = true
		var last int64
		for range 3 {
			lease, err := l.TryAcquire(t.Context())
			if err != nil {
				t.Fatalf("id %q (slot %d): %v", id, slot, err)
			}
			if lease.Fence() <= last {
				t.Fatalf("id %q: fence %d after %d", id, lease.Fence(), last)
			}
			last = lease.Fence()
			if err := lease.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d ids over %d masters", len(ids), len(masters))
}

// Resharding the slot of a held, fenced lock from one master to another
// while the lease is held: during the migration (ASK) and after it (MOVED),
// extend, release and a new acquisition go through the same ClusterClient,
// which follows the redirections; the fence counter moves with the lock and
// keeps increasing.
func TestClusterReshardMoved(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cc := cl.Client(t)
	c := newClientOver(t, cc)
	d := testDomain(t, c, Policy{TTL: 5 * time.Second, Renew: -1, Fencing: true})
	l := lockOn(d, "moving")
	lease, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slot, err := cc.ClusterKeySlot(t.Context(), l.Key()).Result()
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[string]*testserver.Redis{}
	for _, n := range cl.Nodes() {
		byAddr[n.Addr()] = n
	}
	src := byAddr[clusterMasterOf(t, cc, l.Key())]
	var dst *testserver.Redis
	for _, n := range cl.Nodes() {
		if n != src {
			dst = n
			break
		}
	}
	srcC, dstC := src.Client(t), dst.Client(t)
	srcID := srcC.ClusterMyID(t.Context()).Val()
	dstID := dstC.ClusterMyID(t.Context()).Val()
	do := func(rdb *redis.Client, args ...any) any {
		t.Helper()
		v, err := rdb.Do(t.Context(), args...).Result()
		if err != nil {
			t.Fatalf("%v on %s: %v", args, rdb.Options().Addr, err)
		}
		return v
	}
	s := strconv.FormatInt(slot, 10)

	// Start the migration and move the keys: the slot is MIGRATING on src
	// and IMPORTING on dst, so src answers ASK for the keys it no longer has.
	do(dstC, "cluster", "setslot", s, "importing", srcID)
	do(srcC, "cluster", "setslot", s, "migrating", dstID)
	keys := srcC.ClusterGetKeysInSlot(t.Context(), int(slot), 100).Val()
	if len(keys) != 2 {
		t.Fatalf("slot %d holds %v, want the lock and its fence counter", slot, keys)
	}
	args := []any{"migrate", "127.0.0.1", dst.Port(), "", 0, 5000, "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	do(srcC, args...)

	if err := lease.Extend(t.Context()); err != nil {
		t.Fatalf("extend during the migration (ASK): %v", err)
	}
	// Read it on the importing master: ASKING, then PTTL on one connection.
	conn := dstC.Conn()
	defer conn.Close()
	var pttl *redis.DurationCmd
	if _, err := conn.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		p.Do(t.Context(), "asking")
		pttl = p.PTTL(t.Context(), l.Key())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if pttl.Val() < 4*time.Second {
		t.Fatalf("the extend did not reach the importing master: PTTL %v", pttl.Val())
	}

	// Finish: dst owns the slot; src and the third master learn it.
	do(dstC, "cluster", "setslot", s, "node", dstID)
	do(srcC, "cluster", "setslot", s, "node", dstID)
	for _, n := range cl.Nodes() {
		if n != src && n != dst {
			do(n.Client(t), "cluster", "setslot", s, "node", dstID)
		}
	}

	// The client's slot map still says src: src answers MOVED.
	if got := clusterMasterOf(t, cc, l.Key()); got != src.Addr() {
		t.Fatalf("the client already maps slot %d to %s: the extend would not meet MOVED", slot, got)
	}
	if err := lease.Extend(t.Context()); err != nil {
		t.Fatalf("extend after the slot moved (MOVED): %v", err)
	}
	// MOVED makes go-redis reload its slot map in the background.
	for deadline := time.Now().Add(3 * time.Second); clusterMasterOf(t, cc, l.Key()) != dst.Addr(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3s after MOVED the client still maps slot %d to %s, not %s", slot, clusterMasterOf(t, cc, l.Key()), dst.Addr())
		}
	}
	if _, err := lockOn(testDomain(t, newClientOver(t, cl.Client(t)), d.policy), "moving").TryAcquire(t.Context()); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("contender after the move: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatalf("release after the move: %v", err)
	}
	if n := dstC.Exists(t.Context(), l.Key()).Val(); n != 0 {
		t.Fatal("the lock is still on the new master after release")
	}
	again, err := l.TryAcquire(t.Context())
	if err != nil {
		t.Fatalf("re-acquire after the move: %v", err)
	}
	if again.Fence() <= lease.Fence() {
		t.Fatalf("fence after the move %d, before %d: the counter did not move with the lock", again.Fence(), lease.Fence())
	}
	if err := again.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := srcC.Get(t.Context(), l.Key()).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED "+s+" "+dst.Addr()) {
		t.Fatalf("GET on the old master = %v, want MOVED to %s", err, dst.Addr())
	}
}
