package lockkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
)

// Backend is where a Client's locks live, given to New: Redis(rdb) for one
// Redis deployment (single node, Sentinel failover or Cluster), Redlock(nodes...)
// for the Redlock algorithm over independent Redis nodes, or
// postgres.Backend(pool) (package github.com/lockkit/lockkit/postgres) for
// PostgreSQL advisory locks. The generated code does not know which one it
// runs on.
//
// Backends do only their I/O; the Client applies retries, circuit breakers
// (one per node), telemetry, lease tracking, renewal and deadlines the same
// way for all of them, and reports the same errors: contention is
// ErrNotAcquired, a backend failure ErrUnavailable, a loss ErrLockLost.
type Backend struct {
	spec driver.Spec
}

func init() {
	driver.Public = func(s driver.Spec) any { return Backend{spec: s} }
	driver.DoOn = func(ctx context.Context, lock any, be driver.Backend, fn any) error {
		l, ok := lock.(Lock)
		if !ok {
			return fmt.Errorf("lockkit: DoOn: %T is not a lockkit.Lock", lock)
		}
		f, ok := fn.(func(context.Context, *Lease) error)
		if !ok {
			return fmt.Errorf("lockkit: DoOn: %T is not a Do function", fn)
		}
		if l.d == nil {
			return ErrNoClient
		}
		lease, fctx, err := l.acquireOn(ctx, be, true, true)
		if err != nil {
			return err
		}
		return lease.run(fctx, f)
	}
}

// Redis is the backend of one Redis deployment: rdb is a *redis.Client, a
// Sentinel failover client or a *redis.ClusterClient. The Client opens no
// connections of its own and never closes rdb. A Cluster gets one circuit
// breaker per master.
func Redis(rdb redis.UniversalClient) Backend {
	return Backend{spec: redisSpec(rdb)}
}

// Redlock is the backend that runs the Redlock algorithm over N independent
// Redis nodes. N must be odd and at least 3 (typically 3 or 5); New fails
// otherwise, and when two of the clients are the same client or point at the
// same address (one server counted twice would fake a majority).
//
// Every node should be an independent primary (its own machine, no
// replication between them); a node may be a Sentinel failover client, but
// then that node alone is subject to failover's weaknesses.
//
// What the client does with N nodes:
//
//   - Acquire sends the acquire script to every node at once, each through
//     its node's own circuit breaker, and grants the lease once a majority
//     (N/2+1) has taken the key and the lease is still valid: ttl − elapsed −
//     drift > 0, drift 1% of the TTL + 2ms, elapsed measured from before the
//     first send to the return, which comes once the majority answered (plus
//     at most as long again for the remaining nodes, so that healthy
//     stragglers are counted; a hung node is not waited for). If the attempt
//     fails it is released on every node that may have taken the key,
//     including nodes that had not answered yet (they release as soon as
//     their answer arrives, so the release is never overtaken by the
//     acquire).
//   - A failed attempt is ErrNotAcquired when a majority of nodes answered
//     but the lock is held on too many of them, and ErrUnavailable when fewer
//     than a majority answered at all: a majority that cannot be reached is a
//     backend failure, not contention.
//   - Extend needs a majority of nodes to extend; the lease is lost when a
//     majority answered and too few still held it, and stays (until its
//     deadline) when no majority answered. Release goes to every node and
//     reports the lease held when a majority deleted it.
//   - Health stays green while at most N − majority node breakers are open.
//
// Fencing domains are refused on a Redlock client: every node keeps its own
// counter, and a number read from one majority is not guaranteed to exceed
// the one the previous holder got from another. A domain's Policy.Replicas
// applies to each node on its own: a node counts toward the majority only if
// that many of its own replicas acknowledged.
func Redlock(nodes ...redis.UniversalClient) Backend {
	if len(nodes) == 0 {
		return Backend{spec: driver.Spec{Err: errors.New("lockkit: Redlock needs its nodes: lockkit.Redlock(node0, node1, node2) runs Redlock over 3")}}
	}
	return Backend{spec: redlockSpec(nodes)}
}

// redisSpec is the backend of one go-redis client.
func redisSpec(rdb redis.UniversalClient) driver.Spec {
	if rdb == nil {
		return driver.Spec{Err: errors.New("lockkit: New: nil redis client")}
	}
	return driver.Spec{Name: "redis", Open: func(cfg driver.Config) (driver.Backend, error) {
		return newRedisBackend(rdb, cfg.CommandTimeout), nil
	}}
}
