package lockkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/telemetry"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// errContended is the backend's word for "the lock is held": an expected
// outcome, turned into ErrNotAcquired by the acquire loop.
var errContended = errors.New("lockkit: held")

// backend is where leases live. The single-node backend runs the scripts on
// one go-redis client (single node, Sentinel failover or Cluster).
type backend interface {
	// acquire takes key for token per p (TTL, fencing, replicas). It returns
	// the fencing number (0 when fencing is off), errContended when the lock
	// is held, or a backend error.
	acquire(ctx context.Context, key, token string, p *Policy) (int64, error)
	// extend resets key's TTL if it still holds token; held reports whether it did.
	extend(ctx context.Context, key, token string, ttl time.Duration) (held bool, err error)
	// release deletes key if it still holds token; held reports whether it did.
	release(ctx context.Context, key, token string) (held bool, err error)
	ping(ctx context.Context) error
	// breakers lists the node breakers made so far, for health reports.
	breakers() []*breaker.Breaker
	// openTolerated is how many open breakers still leave the backend able
	// to grant locks: 0 for one deployment, N − quorum for Redlock.
	openTolerated() int
	// close stops the backend's own goroutines, if any.
	close()
}

type redisBackend struct {
	rdb        redis.UniversalClient
	nodes      *breakerSet
	cmdTimeout time.Duration
}

func newRedisBackend(rdb redis.UniversalClient, s breaker.Settings, cmdTimeout time.Duration) redisBackend {
	return redisBackend{rdb: rdb, nodes: newBreakerSet(rdb, s, cmdTimeout), cmdTimeout: cmdTimeout}
}

func (b redisBackend) breakers() []*breaker.Breaker { return b.nodes.all() }
func (b redisBackend) openTolerated() int           { return 0 }
func (b redisBackend) close()                       {}

// acquire runs the acquire script through the key's node breaker: an open
// breaker refuses at once, and no lease is granted while the node is
// uncertain. ctx is the caller's: the breaker tells its ending apart from a
// command timeout.
func (b redisBackend) acquire(ctx context.Context, key, token string, p *Policy) (int64, error) {
	keys := []string{key}
	if p.Fencing {
		keys = append(keys, key+fenceSuffix)
	}
	var n int64
	br := b.nodes.forKey(ctx, key)
	if trace.SpanFromContext(ctx).IsRecording() {
		// Mark the acquisition whose outcome moved the breaker. Only when
		// traced: reading the state takes the breaker's lock twice.
		before := br.State()
		defer func() {
			if after := br.State(); after != before {
				telemetry.BreakerChanged(ctx, br.Name(), before.String(), after.String())
			}
		}()
	}
	err := br.Do(ctx, func(ctx context.Context) error {
		cctx := commandCtx(ctx, b.cmdTimeout+p.ReplicaTimeout)
		var err error
		switch {
		case p.Replicas > 0:
			n, err = b.acquireReplicated(cctx, keys, token, p)
		case p.Fencing:
			n, err = acquireScript.Run(cctx, b.rdb, keys, token, p.TTL.Milliseconds()).Int64()
		default:
			// Without fencing there is nothing for a script to add: a plain
			// SET NX PX is the same single atomic step and spares Redis a
			// Lua call (about a fifth of an uncontended acquire+release).
			var ok bool
			ok, err = b.rdb.SetNX(cctx, keys[0], token, p.TTL).Result()
			if err == nil && !ok {
				err = redis.Nil
			}
		}
		return err
	})
	if err == redis.Nil {
		return 0, errContended
	}
	return n, err
}

// errReplicas is an acquisition whose write too few replicas acknowledged.
var errReplicas = errors.New("too few replicas acknowledged the lock")

// acquireReplicated sends the acquire script and WAIT in one pipeline (one
// round trip) on the node that owns the key. When fewer than p.Replicas
// acknowledge in time, it releases the lock and fails: a lease that only the
// primary knows about can be granted again after a failover.
func (b redisBackend) acquireReplicated(ctx context.Context, keys []string, token string, p *Policy) (int64, error) {
	var node redis.Cmdable = b.rdb
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		// WAIT has no key: it must go to the master that took the write.
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return 0, err
		}
		node = m
	}
	run := func(eval func(redis.Pipeliner) *redis.Cmd) (acq, wait *redis.Cmd, err error) {
		_, err = node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			acq = eval(pipe)
			wait = pipe.Do(ctx, "wait", p.Replicas, p.ReplicaTimeout.Milliseconds())
			return nil
		})
		return acq, wait, err
	}
	ttl := p.TTL.Milliseconds()
	acq, wait, _ := run(func(pipe redis.Pipeliner) *redis.Cmd {
		return pipe.EvalSha(ctx, acquireScript.Hash(), keys, token, ttl)
	})
	if redis.HasErrorPrefix(acq.Err(), "NOSCRIPT") {
		acq, wait, _ = run(func(pipe redis.Pipeliner) *redis.Cmd {
			return pipe.Eval(ctx, acquireSrc, keys, token, ttl)
		})
	}
	n, err := acq.Int64()
	if err != nil {
		return 0, err // redis.Nil (held) included
	}
	acked, werr := wait.Int64()
	if werr == nil && acked >= int64(p.Replicas) {
		return n, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cmdTimeout)
	defer cancel()
	_, _ = releaseScript.Run(rctx, b.rdb, keys[:1], token).Result()
	if werr != nil {
		return 0, fmt.Errorf("%w: WAIT: %w", errReplicas, werr)
	}
	return 0, fmt.Errorf("%w: %d of %d within %v; the lock was released", errReplicas, acked, p.Replicas, p.ReplicaTimeout)
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
	settings   breaker.Settings
	cmdTimeout time.Duration // bounds a Cluster slot-map lookup
	single     *breaker.Breaker
	cluster    *redis.ClusterClient
	mu         sync.Mutex
	byNode     map[string]*breaker.Breaker
}

// wholeCluster names the breaker of keys whose node the slot map cannot tell.
const wholeCluster = "cluster"

func newBreakerSet(rdb redis.UniversalClient, s breaker.Settings, cmdTimeout time.Duration) *breakerSet {
	bs := &breakerSet{settings: s, cmdTimeout: cmdTimeout}
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
// slot map cannot say (no node reachable, e.g. a process started during an
// outage), the key falls to a breaker for the cluster as a whole, which then
// sees the failures. The lookup is bounded by the command timeout and
// skipped while that breaker is open, so an open breaker refuses at once
// even when go-redis has no slot map to consult.
func (bs *breakerSet) forKey(ctx context.Context, key string) *breaker.Breaker {
	if bs.cluster == nil {
		return bs.single
	}
	if whole := bs.named(wholeCluster, false); whole != nil && whole.State() == breaker.StateOpen {
		return whole
	}
	lctx, cancel := context.WithTimeout(ctx, bs.cmdTimeout)
	node, err := bs.cluster.MasterForKey(lctx, key)
	cancel()
	if err != nil {
		return bs.named(wholeCluster, true)
	}
	return bs.named(node.Options().Addr, true)
}

// named returns the breaker called name, making it when create is set.
func (bs *breakerSet) named(name string, create bool) *breaker.Breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.byNode[name]
	if !ok && create {
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
