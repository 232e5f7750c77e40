package lockkit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/redis/go-redis/v9"
)

// errContended is the backend's word for "the lock is held": an expected
// outcome, turned into ErrNotAcquired by the acquire loop.
var errContended = errors.New("lockkit: held")

// backend is where leases live. The single-node backend runs the scripts on
// one go-redis client (single node, Sentinel failover or Cluster).
type backend interface {
	// acquire takes key for token. It returns the fencing number (0 when
	// fencing is off), errContended when the lock is held, or a backend error.
	acquire(ctx context.Context, key string, fencing bool, token string, ttl time.Duration) (int64, error)
	// extend resets key's TTL if it still holds token; held reports whether it did.
	extend(ctx context.Context, key, token string, ttl time.Duration) (held bool, err error)
	// release deletes key if it still holds token; held reports whether it did.
	release(ctx context.Context, key, token string) (held bool, err error)
	ping(ctx context.Context) error
}

type redisBackend struct {
	rdb        redis.UniversalClient
	breakers   *breakerSet
	cmdTimeout time.Duration
}

// acquire runs the acquire script through the key's node breaker: an open
// breaker refuses at once, and no lease is granted while the node is
// uncertain. ctx is the caller's: the breaker tells its ending apart from a
// command timeout.
func (b redisBackend) acquire(ctx context.Context, key string, fencing bool, token string, ttl time.Duration) (int64, error) {
	keys := []string{key}
	if fencing {
		keys = append(keys, key+fenceSuffix)
	}
	var n int64
	err := b.breakers.forKey(ctx, key).Do(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, b.cmdTimeout)
		defer cancel()
		var err error
		n, err = acquireScript.Run(cctx, b.rdb, keys, token, ttl.Milliseconds()).Int64()
		return err
	})
	if err == redis.Nil {
		return 0, errContended
	}
	return n, err
}

func (b redisBackend) extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := extendScript.Run(ctx, b.rdb, []string{key}, token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (b redisBackend) release(ctx context.Context, key, token string) (bool, error) {
	n, err := releaseScript.Run(ctx, b.rdb, []string{key}, token).Int64()
	return n == 1, err
}

func (b redisBackend) ping(ctx context.Context) error { return b.rdb.Ping(ctx).Err() }

// breakerSet holds one breaker per backend node: a single one for a plain or
// Sentinel failover client (one primary at a time), one per master for a
// Cluster client.
type breakerSet struct {
	settings breaker.Settings
	single   *breaker.Breaker
	cluster  *redis.ClusterClient
	mu       sync.Mutex
	byNode   map[string]*breaker.Breaker
}

func newBreakerSet(rdb redis.UniversalClient, s breaker.Settings) *breakerSet {
	bs := &breakerSet{settings: s}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		bs.cluster = c
		bs.byNode = make(map[string]*breaker.Breaker)
	case *redis.Client:
		bs.single = breaker.New(c.Options().Addr, s)
	default:
		bs.single = breaker.New("redis", s)
	}
	return bs
}

// forKey is the breaker of the node that serves key. When the cluster's
// slot map cannot say (no node reachable), the key falls to a breaker for
// the cluster as a whole, which then sees the failures.
func (bs *breakerSet) forKey(ctx context.Context, key string) *breaker.Breaker {
	if bs.cluster == nil {
		return bs.single
	}
	name := "cluster"
	if node, err := bs.cluster.MasterForKey(ctx, key); err == nil {
		name = node.Options().Addr
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.byNode[name]
	if !ok {
		b = breaker.New(name, bs.settings)
		bs.byNode[name] = b
	}
	return b
}

// all lists the breakers made so far, for health reports.
func (bs *breakerSet) all() []*breaker.Breaker {
	if bs.cluster == nil {
		return []*breaker.Breaker{bs.single}
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	out := make([]*breaker.Breaker, 0, len(bs.byNode))
	for _, b := range bs.byNode {
		out = append(out, b)
	}
	return out
}
