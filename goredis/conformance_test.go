package goredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/driver/drivertest"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// The conformance suite on every Redis deployment, with clients configured
// as the README shows users (go-redis defaults, ContextTimeoutEnabled). A
// key is taken from its holder by deleting it.

const redisTTL = 500 * time.Millisecond

func userClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func del(t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := rdb.Del(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %s = %d, %v", key, n, err)
	}
}

func TestConformanceRedis(t *testing.T) { conformanceRedis(t, "redis", goredis.New) }

// The same suite with the lock commands on go-redis's autopipeliner.
func TestConformanceAutoPipelined(t *testing.T) {
	conformanceRedis(t, "redis-autopipelined", autopipeline.New)
}

func conformanceRedis[C redis.UniversalClient](t *testing.T, name string, spec func(C) driver.Spec) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	drivertest.Run(t, drivertest.Harness{
		Name:  name,
		Open:  func(t *testing.T) driver.Spec { return spec(any(userClient(t, r.Addr())).(C)) },
		TTL:   redisTTL,
		Steal: func(t *testing.T, key string) { del(t, admin, key) },
		Stop:  func(t *testing.T) { r.Stop(t) },
		Start: func(t *testing.T) { r.Restart(t) },
	})
}

func TestConformanceSentinel(t *testing.T) { conformanceSentinel(t, "sentinel", goredis.New) }

// Sentinel's failover client with the lock commands on its autopipeliner.
func TestConformanceSentinelAutoPipelined(t *testing.T) {
	conformanceSentinel(t, "sentinel-autopipelined", autopipeline.New)
}

func conformanceSentinel[C redis.UniversalClient](t *testing.T, name string, spec func(C) driver.Spec) {
	primary := testserver.StartRedis(t)
	testserver.StartReplica(t, primary)
	s := testserver.StartSentinel(t, primary, "lockkit", 1)
	admin := primary.Client(t)
	drivertest.Run(t, drivertest.Harness{
		Name: name,
		Open: func(t *testing.T) driver.Spec {
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: []string{s.Addr()}, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			return spec(any(rdb).(C))
		},
		TTL:   redisTTL,
		Steal: func(t *testing.T, key string) { del(t, admin, key) },
		// Every write acknowledged by the replica, then a failover to it.
		Replicas: 1,
		Failover: func(t *testing.T, _ string) { s.Failover(t) },
	})
}

// A Cluster whose masters have a replica each, every domain at replicas:
// 1; the failover moves the key's slot to another master, then promotes
// that master's replica.
func TestConformanceClusterReplicas(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	cl.AddReplicas(t)
	admin := cl.Client(t)
	drivertest.Run(t, drivertest.Harness{
		Name:     "cluster-replicas",
		Open:     clusterSpec(cl),
		TTL:      redisTTL,
		Steal:    func(t *testing.T, key string) { del(t, admin, key) },
		Replicas: 1,
		Failover: func(t *testing.T, key string) {
			moved := cl.MoveSlot(t, key)
			promoted := cl.FailoverKey(t, key)
			t.Logf("slot of %s moved to %s, then its replica %s promoted", key, moved, promoted)
		},
	})
}

// clusterSpec opens a Spec over a user's ClusterClient on cl's masters.
func clusterSpec(cl *testserver.Cluster) func(t *testing.T) driver.Spec {
	return func(t *testing.T) driver.Spec {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		return goredis.New(rdb)
	}
}

func TestConformanceCluster(t *testing.T) {
	cl := testserver.StartCluster(t, 3)
	admin := cl.Client(t)
	drivertest.Run(t, drivertest.Harness{
		Name:  "cluster",
		Open:  clusterSpec(cl),
		TTL:   redisTTL,
		Steal: func(t *testing.T, key string) { del(t, admin, key) },
		// Every node: the nodes keep their cluster config (nodes.conf), not
		// their data.
		Stop: func(t *testing.T) {
			for _, n := range cl.Nodes() {
				n.Stop(t)
			}
		},
		Start: func(t *testing.T) {
			for _, n := range cl.Nodes() {
				n.Restart(t)
			}
			cl.WaitOK(t)
		},
	})
}

func TestConformanceRedlock(t *testing.T) {
	nodes := []*testserver.Redis{testserver.StartRedis(t), testserver.StartRedis(t), testserver.StartRedis(t)}
	for _, n := range nodes { // as an operator marks new nodes (docs/deployments.md)
		if err := rediswire.MarkRedlockNode(t.Context(), n.Client(t)); err != nil {
			t.Fatal(err)
		}
	}
	drivertest.Run(t, drivertest.Harness{
		Name: "redlock",
		Open: func(t *testing.T) driver.Spec {
			return goredis.Redlock(userClient(t, nodes[0].Addr()), userClient(t, nodes[1].Addr()), userClient(t, nodes[2].Addr()))
		},
		TTL: redisTTL,
		// Deleted on every node; the holder had it on a majority at least.
		Steal: func(t *testing.T, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var deleted int64
			for _, n := range nodes {
				d, err := n.Client(t).Del(ctx, key).Result()
				if err != nil {
					t.Fatalf("DEL %s on %s: %v", key, n.Addr(), err)
				}
				deleted += d
			}
			if deleted < 2 {
				t.Fatalf("DEL %s: the key was on %d of 3 nodes; the holder needs a majority", key, deleted)
			}
		},
		Stop: func(t *testing.T) {
			for _, n := range nodes {
				n.Stop(t)
			}
		},
		Start: func(t *testing.T) {
			for _, n := range nodes {
				n.Restart(t)
			}
		},
		// One node restarted empty (no persistence) under the holder.
		Failover: func(t *testing.T, _ string) { nodes[1].Restart(t) },
	})
}
