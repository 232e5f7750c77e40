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
	raw := rawConn(t, z.Servers())
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
		Start: func(t *testing.T) { z.Members[0].Start(t) },
	})
}
