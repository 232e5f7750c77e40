package etcd_test

import (
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/driver/drivertest"
	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The conformance suite on a 1-member etcd: Steal deletes every key of the
// lock (its holder's included) with a raw client; Stop and Start stop the
// member and start it again with its data, which keeps keys and leases
// (Durable: the holder keeps its lock through the restart; fences keep
// rising across it).
func TestConformance(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	raw := newCli(t, c)
	drivertest.Run(t, drivertest.Harness{
		Name: "etcd",
		Open: func(t *testing.T) driver.Spec { return etcd.New(newCli(t, c)) },
		TTL:  ttl,
		Steal: func(t *testing.T, key string) {
			if _, err := raw.Delete(ctxT(t, 5*time.Second), key+"\x00", clientv3.WithRange(key+"\x01")); err != nil {
				t.Fatalf("steal %s: %v", key, err)
			}
		},
		Stop:    func(t *testing.T) { c.Members[0].Stop(t) },
		Start:   func(t *testing.T) { c.Members[0].Start(t) },
		Durable: true,
	})
}
