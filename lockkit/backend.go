package lockkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockkit/lockkit/internal/backend"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/redis/go-redis/v9"
)

// redisBackend runs the scripts on one go-redis client (single node,
// Sentinel failover or Cluster). It does I/O only (internal/backend): the
// Client puts each node's breaker in front of it (Router names the Cluster
// master of a key).
type redisBackend struct {
	rdb        redis.UniversalClient
	cluster    *redis.ClusterClient // nil unless rdb is one
	name       string
	cmdTimeout time.Duration
	fifo       fifoState // FIFO waiting's Notifier (backend_fifo.go)
}

var (
	_ backend.Backend = (*redisBackend)(nil)
	_ backend.Named   = (*redisBackend)(nil)
	_ backend.Router  = clusterBackend{}
)

// clusterBackend is a redisBackend over a Cluster client: the Router that
// gives each master its own breaker.
type clusterBackend struct{ *redisBackend }

// wholeCluster names the breaker of keys whose node the slot map cannot tell.
const wholeCluster = "cluster"

func newRedisBackend(rdb redis.UniversalClient, cmdTimeout time.Duration) backend.Backend {
	b := &redisBackend{rdb: rdb, cmdTimeout: cmdTimeout, name: "redis"}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		b.cluster, b.name = c, wholeCluster
		return clusterBackend{b}
	case *redis.Client:
		b.name = c.Options().Addr
	}
	return b
}

// Name is the node's address (a plain client), "redis" (another universal
// client) or "cluster": the breaker of keys whose master is unknown.
func (b *redisBackend) Name() string { return b.name }

// cheapDeadlines marks a backend whose client reads a ctx's deadline into
// its connection deadlines, so the Client bounds its commands with
// commandCtx (no timer) rather than context.WithTimeout.
func (b *redisBackend) cheapDeadlines() {}

// NodeFor is the address of the Cluster master that serves key. The lookup
// is bounded by the command timeout.
func (b clusterBackend) NodeFor(ctx context.Context, key string) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, b.cmdTimeout)
	node, err := b.cluster.MasterForKey(lctx, key)
	cancel()
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// Acquire runs the acquire script (or SET NX PX without fencing), with WAIT
// when req asks for replicas.
func (b *redisBackend) Acquire(ctx context.Context, req *backend.Request) (int64, error) {
	keys := []string{req.Key}
	if req.Fencing {
		keys = append(keys, req.Key+fenceSuffix)
	}
	var (
		n   int64
		err error
	)
	switch {
	case req.Replicas > 0:
		n, err = b.acquireReplicated(ctx, keys, req)
	case req.Fencing:
		n, err = acquireScript.Run(ctx, b.rdb, keys, holder.Value(req.Token, req.Holder), req.TTL.Milliseconds()).Int64()
	default:
		// Without fencing there is nothing for a script to add: a plain
		// SET NX PX is the same single atomic step and spares Redis a
		// Lua call (about a fifth of an uncontended acquire+release).
		var ok bool
		ok, err = b.rdb.SetNX(ctx, keys[0], holder.Value(req.Token, req.Holder), req.TTL).Result()
		if err == nil && !ok {
			err = redis.Nil
		}
	}
	if err == redis.Nil {
		return 0, backend.ErrContended
	}
	return n, err
}

// errReplicas is an acquisition whose write too few replicas acknowledged.
var errReplicas = errors.New("too few replicas acknowledged the lock")

// acquireReplicated sends the acquire script and WAIT in one pipeline (one
// round trip) on the node that owns the key. When fewer than p.Replicas
// acknowledge in time, it releases the lock and fails: a lease that only the
// primary knows about can be granted again after a failover.
func (b *redisBackend) acquireReplicated(ctx context.Context, keys []string, p *backend.Request) (int64, error) {
	value := holder.Value(p.Token, p.Holder) // the token, and who holds it
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
		return pipe.EvalSha(ctx, acquireScript.Hash(), keys, value, ttl)
	})
	if redis.HasErrorPrefix(acq.Err(), "NOSCRIPT") {
		acq, wait, _ = run(func(pipe redis.Pipeliner) *redis.Cmd {
			return pipe.Eval(ctx, acquireSrc, keys, value, ttl)
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
	_, _ = releaseScript.Run(rctx, b.rdb, keys[:1], p.Token).Result()
	if werr != nil {
		return 0, fmt.Errorf("%w: WAIT: %w", errReplicas, werr)
	}
	return 0, fmt.Errorf("%w: %d of %d within %v; the lock was released", errReplicas, acked, p.Replicas, p.ReplicaTimeout)
}

func (b *redisBackend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := extendScript.Run(ctx, b.rdb, []string{key}, token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (b *redisBackend) Release(ctx context.Context, key, token string) (bool, error) {
	n, err := releaseScript.Run(ctx, b.rdb, []string{key}, token).Int64()
	return n == 1, err
}

func (b *redisBackend) Ping(ctx context.Context) error { return b.rdb.Ping(ctx).Err() }

// Close closes the FIFO Notifier, if any; the go-redis client is the caller's.
func (b *redisBackend) Close() error {
	b.closeNotifier()
	return nil
}
