package fifo

import (
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// TestClusterLocksOnAllSlots: on a 3-master Cluster, a key without a hash
// tag is refused; on keys spread over every master, a queued waiter is woken
// by a sharded push through its client's Notifier (SSUBSCRIBE to the slot's
// master). A lock in every slot is taken, contended and given back at the
// client level (lockkit's TestFIFOClusterLocksOnAllSlots).
func TestClusterLocksOnAllSlots(t *testing.T) {
	testserver.RequireRedis(t)
	testserver.RequireRedisCLI(t)
	cl := testserver.StartCluster(t, 3)
	rdb := cl.Client(t)
	ctx := tctx(t, 120*time.Second)

	if _, err := acq(ctx, rdb, "lock:untagged", newToken(), time.Second, false, time.Second, ""); err == nil {
		t.Fatal("a key without a hash tag was accepted on a Cluster")
	}

	keys := testserver.KeyPerSlot()
	// Every slot through the client: lockkit's TestFIFOClusterLocksOnAllSlots.

	// Push wake-ups: 8 keys on each master.
	n := NewNotifier(rdb, NotifierOptions{})
	t.Cleanup(func() { _ = n.Close() })
	for _, km := range testserver.KeysPerMaster(t, ctx, rdb, keys, 8, 3) {
		k, m := km.Key, km.Master
		holder, waiter := newToken(), newToken()
		if r, _ := acq(ctx, rdb, k, holder, 5*time.Second, false, 5*time.Second, ""); !r.Granted {
			t.Fatalf("%s: holder not granted", k)
		}
		if r, _ := acq(ctx, rdb, k, waiter, 5*time.Second, false, 5*time.Second, n.Channel(k)); r.Position != 1 {
			t.Fatalf("%s: waiter at %d", k, r.Position)
		}
		w := n.Subscribe(k, waiter)
		waitFor(t, "the shard subscription of "+k, func() bool {
			v, _ := m.Do(ctx, "PUBSUB", "SHARDNUMSUB", n.Channel(k)).Slice()
			return len(v) == 2 && v[1] == int64(1)
		})
		if held, _ := Release(ctx, rdb, k, holder, ""); !held {
			t.Fatalf("%s: release", k)
		}
		waitPush(t, ctx, w)
		if r, _ := acq(ctx, rdb, k, waiter, 5*time.Second, false, 5*time.Second, ""); !r.Granted {
			t.Fatalf("%s: woken waiter not granted", k)
		}
		w.Close()
		_, _ = Release(ctx, rdb, k, waiter, "")
	}
}
