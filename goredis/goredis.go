package goredis

import (
	"errors"
	"fmt"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis/internal/seam"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

// New is the backend of one Redis deployment: rdb is a *redis.Client, a
// Sentinel failover client or a *redis.ClusterClient. The Client opens no
// connections of its own and never closes rdb. A Cluster gets one circuit
// breaker per master.
func New(rdb redis.UniversalClient) driver.Spec {
	return redisSpec(rdb)
}

func init() {
	// goredis/autopipeline's New; there, not here, so that only a program
	// that imports it compiles go-redis's experimental autopipelining API.
	seam.WithCommands = func(who string, rdb *redis.Client, cmds func() (rediswire.Processor, error)) driver.Spec {
		if err := checkRedisClient(rdb); err != nil {
			return driver.Spec{Err: fmt.Errorf("lockkit: %s: %w", who, err)}
		}
		return driver.Spec{Name: "redis", Open: func(cfg driver.Config) (driver.Backend, error) {
			p, err := cmds()
			if err != nil {
				return nil, fmt.Errorf("lockkit: %s: %w", who, err)
			}
			warnClient(rdb, cfg)
			checkServers(rdb, cfg)
			b := newRedisBackend(rdb, cfg.CommandTimeout).(*redisBackend)
			b.cmds = p
			return b, nil
		}}
	}
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
//   - A node that restarted or lost its data votes for a key only once the
//     key's TTL has passed since its first use after that (a marker on the
//     node, lockkit:redlock-node, docs/wire.md): until then it answers
//     "quarantined", which no breaker counts. A new node is quarantined the
//     same way for its first TTL unless an operator marked it
//     (docs/deployments.md).
//
// Fencing domains are refused on a Redlock client: every node keeps its own
// counter, and a number read from one majority is not guaranteed to exceed
// the one the previous holder got from another. A domain's Policy.Replicas
// applies to each node on its own: a node counts toward the majority only if
// that many of its own replicas acknowledged.
func Redlock(nodes ...redis.UniversalClient) driver.Spec {
	if len(nodes) == 0 {
		return driver.Spec{Err: errors.New("lockkit: Redlock needs its nodes: goredis.Redlock(node0, node1, node2) runs Redlock over 3")}
	}
	return redlockSpec(nodes)
}

// redisSpec is the backend of one go-redis client.
func redisSpec(rdb redis.UniversalClient) driver.Spec {
	if err := checkRedisClient(rdb); err != nil {
		return driver.Spec{Err: fmt.Errorf("lockkit: goredis.New: %w", err)}
	}
	return driver.Spec{Name: "redis", Open: func(cfg driver.Config) (driver.Backend, error) {
		warnClient(rdb, cfg)
		checkServers(rdb, cfg)
		return newRedisBackend(rdb, cfg.CommandTimeout), nil
	}}
}

// checkRedisClient refuses a client that would panic at the first command: a
// nil interface, a typed nil (*redis.Client)(nil), or a zero value such as
// &redis.Client{} that no constructor made.
func checkRedisClient(rdb redis.UniversalClient) error {
	switch c := rdb.(type) {
	case nil:
		return errors.New("nil redis client")
	case *redis.Client:
		if c == nil || unmade(func() bool { return c.Options() == nil }) {
			return errors.New("redis client is nil or not made by redis.NewClient / redis.NewFailoverClient")
		}
	case *redis.ClusterClient:
		if c == nil || unmade(func() bool { return c.Options() == nil }) {
			return errors.New("redis cluster client is nil or not made by redis.NewClusterClient")
		}
	case *redis.Ring:
		if c == nil || unmade(func() bool { return c.Options() == nil }) {
			return errors.New("redis ring client is nil or not made by redis.NewRing")
		}
	}
	return nil
}

// unmade runs a probe of a go-redis client's options: true when they are
// missing, or reading them panics (a zero client value has no inner state).
func unmade(noOptions func() bool) (bad bool) {
	defer func() {
		if recover() != nil {
			bad = true
		}
	}()
	return noOptions()
}
