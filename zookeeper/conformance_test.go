package zookeeper_test

import (
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/driver/drivertest"
	"github.com/lockkit/lockkit/zookeeper"
)

// TestConformance runs driver/drivertest against one ZooKeeper server: a
// fresh backend per subtest; Steal deletes the lock's nodes behind the
// holder's back; Stop and Start stop the server and start it again on its
// data directory. ZooKeeper keeps sessions across a restart (they are in its
// snapshot, and get a fresh timeout when it loads them), so a holder's lock
// survives a restart shorter than its TTL: Stop keeps the server down past
// the suite's longest TTL (10s), which is what a holder must then notice.
func TestConformance(t *testing.T) {
	z := startZK(t, 1)
	// Steal's own session. It is made again after each Start: the old
	// session's reconnect may have begun while the server was going down,
	// and go-zookeeper then waits up to 10 × its receive timeout (about
	// 67s for this 10s session) for a handshake answer: longer than nodes'
	// 20s wait. Under a CPU hog, LostMidFn, right after Restart, failed so
	// ("children of …: zk: could not connect to a server"), as
	// TestZooKeeperSingle in internal/testserver did before it.
	raw := dialRaw(t, z.Servers())
	t.Cleanup(func() { raw.Close() })
	drivertest.Run(t, drivertest.Harness{
		Name: "zookeeper",
		Open: func(t *testing.T) driver.Spec { return zookeeper.New(z.Servers(), bounds) },
		TTL:  time.Second,
		Steal: func(t *testing.T, key string) {
			path := zookeeper.LockPath("/lockkit", key)
			for _, n := range nodes(t, raw, path) {
				if err := raw.Delete(path+"/"+n, -1); err != nil {
					t.Fatalf("steal %s: %v", key, err)
				}
			}
		},
		Stop: func(t *testing.T) {
			z.Members[0].Stop(t)
			time.Sleep(11 * time.Second)
		},
		Start: func(t *testing.T) {
			z.Members[0].Start(t)
			old := raw
			raw = dialRaw(t, z.Servers())
			old.Close()
		},
	})
}
