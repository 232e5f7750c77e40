package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/redisclass"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

// redisBackend runs the scripts on one go-redis client (single node,
// Sentinel failover or Cluster). It does I/O only (package driver): the
// Client puts each node's breaker in front of it (Router names the Cluster
// master of a key).
type redisBackend struct {
	rdb redis.UniversalClient
	// cmds sends the single-key commands of a lease (acquire without
	// Redlock or replicas, extend, release): on a *redis.Client (one node,
	// Sentinel) a rediswire.Combiner over it, which sends the commands of
	// many concurrent callers as one pipeline; rdb itself on a Cluster (a
	// batch would wait for its slowest master); or the autopipeliner of
	// goredis/autopipeline. A replicated acquire's give-back stays on rdb,
	// the acquire's own path.
	cmds       rediswire.Processor
	cluster    *redis.ClusterClient // nil unless rdb is one
	name       string
	cmdTimeout time.Duration
	fifo       fifoState // FIFO waiting's Notifier (backend_fifo.go)
	// redlock: a Redlock member, whose acquire is its vote, refused while
	// it is quarantined (rediswire.RedlockAcquireScript).
	redlock bool
}

var (
	_ driver.Backend         = (*redisBackend)(nil)
	_ driver.Router          = clusterBackend{}
	_ driver.Batcher         = (*redisBackend)(nil)
	_ driver.ReplicaExtender = (*redisBackend)(nil)
	_ driver.HolderReader    = (*redisBackend)(nil)
)

// clusterBackend is a redisBackend over a Cluster client: the Router that
// gives each master its own breaker.
type clusterBackend struct{ *redisBackend }

// wholeCluster names the breaker of keys whose node the slot map cannot tell.
const wholeCluster = "cluster"

func newRedisBackend(rdb redis.UniversalClient, cmdTimeout time.Duration) driver.Backend {
	b := &redisBackend{rdb: rdb, cmds: rdb, cmdTimeout: cmdTimeout, name: "redis"}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		b.cluster, b.name = c, wholeCluster
		return clusterBackend{b}
	case *redis.Client:
		b.name = c.Options().Addr
		b.cmds = rediswire.NewCombiner(c, rediswire.CombineLimit)
	}
	return b
}

// Capabilities: named after the node's address (a plain client), "redis"
// (another universal client) or "cluster" (the breaker of keys whose master
// is unknown); TTLs in whole milliseconds (PX); fences; FIFO queues; sets in
// one script; holder reads.
func (b *redisBackend) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Name: b.name, MinTTL: time.Millisecond, TTLGranularity: time.Millisecond,
		Fences: true, FairQueue: true, Batching: true, Holders: true, Failover: b.deployment(),
	}
}

// Capabilities: a Cluster also routes each key to its master's breaker.
func (b clusterBackend) Capabilities() driver.Capabilities {
	c := b.redisBackend.Capabilities()
	c.Routing = true
	return c
}

// deployment names a deployment that fails over to asynchronous replicas:
// a Cluster, or a Sentinel failover client (go-redis gives the latter the
// address "FailoverClient").
func (b *redisBackend) deployment() string {
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		return "Redis Cluster"
	case *redis.Client:
		if c.Options().Addr == "FailoverClient" {
			return "Redis Sentinel"
		}
	}
	return ""
}

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
func (b *redisBackend) Acquire(ctx context.Context, req *driver.Request) (int64, error) {
	// The key list only for a script (SET below takes the key itself).
	keys := func() []string {
		if req.Fencing {
			return []string{req.Key, policy.FenceKey(req.Key)}
		}
		return []string{req.Key}
	}
	if b.redlock {
		return 0, b.vote(ctx, req)
	}
	var (
		n   int64
		err error
	)
	switch {
	case req.Replicas > 0:
		n, err = b.acquireReplicated(ctx, rediswire.AcquireScript, rediswire.AcquireSrc, keys(), req)
	case req.Fencing:
		n, err = rediswire.RunOnce(ctx, b.cmds, rediswire.AcquireScript, rediswire.AcquireSrc, keys(), holder.Value(req.Token, req.Holder), rediswire.Int(req.TTL.Milliseconds())).Int64()
	default:
		// Without fencing there is nothing for a script to add: a plain
		// SET NX PX is the same single atomic step and spares Redis a
		// Lua call (about a fifth of an uncontended acquire+release).
		// A reply other than OK is redis.Nil: not set.
		err = rediswire.Once(ctx, b.cmds, "set", req.Key, holder.Value(req.Token, req.Holder), "px", rediswire.Int(req.TTL.Milliseconds()), "nx").Err()
	}
	if err == redis.Nil {
		return 0, driver.ErrContended
	}
	if req.Fencing {
		err = rediswire.FenceError(err, keys())
	}
	return n, redisclass.Mark(err)
}

// vote is a Redlock member's acquire (the Redlock acquire script, with WAIT
// when req asks for replicas): nil when it took the key, ErrContended when
// the key is held, a *quarantinedError while the node is quarantined.
func (b *redisBackend) vote(ctx context.Context, req *driver.Request) error {
	keys := []string{req.Key, policy.RedlockMarkerFor(req.Key, b.cluster != nil)}
	var (
		n   int64
		err error
	)
	if req.Replicas > 0 {
		n, err = b.acquireReplicated(ctx, rediswire.RedlockAcquireScript, rediswire.RedlockAcquireSrc, keys, req)
	} else {
		n, err = rediswire.RunOnce(ctx, b.rdb, rediswire.RedlockAcquireScript, rediswire.RedlockAcquireSrc, keys, holder.Value(req.Token, req.Holder), rediswire.Int(req.TTL.Milliseconds())).Int64()
	}
	switch {
	case err == redis.Nil:
		return driver.ErrContended
	case err != nil:
		return redisclass.Mark(err)
	case n < 0:
		return &quarantinedError{left: time.Duration(-n) * time.Millisecond}
	}
	return nil
}

// acquireReplicated sends an acquire script and WAIT in one pipeline (one
// round trip) on the node that owns the key. When fewer than p.Replicas
// acknowledge in time, it releases the lock and fails: a lease that only the
// primary knows about can be granted again after a failover. A negative
// reply (a quarantined Redlock node: it took nothing) is returned as it is.
func (b *redisBackend) acquireReplicated(ctx context.Context, script *redis.Script, src string, keys []string, p *driver.Request) (int64, error) {
	value := holder.Value(p.Token, p.Holder) // the token, and who holds it
	acq, wait, err := b.evalWithWait(ctx, script, src, keys, []any{value, p.TTL.Milliseconds()}, p.Replicas, p.ReplicaTimeout)
	if err != nil {
		return 0, err
	}
	n, err := acq.Int64()
	if err != nil || n < 0 {
		return n, err // redis.Nil (held) included
	}
	acked, werr := wait.Int64()
	if werr == nil && acked >= int64(p.Replicas) {
		return n, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cmdTimeout)
	defer cancel()
	_, _ = rediswire.RunOnce(rctx, b.rdb, rediswire.ReleaseScript, rediswire.ReleaseSrc, keys[:1], p.Token).Result()
	if werr != nil {
		return 0, fmt.Errorf("%w: WAIT: %w", rediswire.ErrReplicas, werr)
	}
	return 0, fmt.Errorf("%w: %d of %d within %v; the lock was released", rediswire.ErrReplicas, acked, p.Replicas, p.ReplicaTimeout)
}

// evalWithWait sends script and WAIT in one pipeline (one round trip) on the
// node that owns keys[0], with EVAL after a NOSCRIPT. WAIT has no key: on a
// Cluster it must go to the master that took the write. The pipeline runs on
// that master's own client, so evalWithWait follows the Cluster's redirects
// itself (followRedirect).
func (b *redisBackend) evalWithWait(ctx context.Context, script *redis.Script, src string, keys []string, args []any, replicas int, timeout time.Duration) (acq, wait *redis.Cmd, err error) {
	var node redis.UniversalClient = b.rdb
	if b.cluster != nil {
		m, err := b.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, nil, err
		}
		node = m
	}
	asking := false
	for redirects := 0; ; redirects++ {
		acq, wait = pipeWithWait(ctx, node, asking, script, src, keys, args, replicas, timeout)
		if b.cluster == nil || redirects >= b.cluster.Options().MaxRedirects {
			return acq, wait, nil
		}
		next, ask, err := b.followRedirect(ctx, acq.Err())
		if err != nil {
			return nil, nil, err
		}
		if next == nil {
			return acq, wait, nil
		}
		node, asking = next, ask
	}
}

// pipeWithWait is evalWithWait's round trip on one node: the script (EVALSHA,
// EVAL after a NOSCRIPT), then WAIT, after ASKING when the node is the target
// of an ASK redirect (ASKING lets the next command alone into an importing
// slot, so a resent EVAL has its own).
func pipeWithWait(ctx context.Context, node redis.UniversalClient, asking bool, script *redis.Script, src string, keys []string, args []any, replicas int, timeout time.Duration) (acq, wait *redis.Cmd) {
	run := func(name string, body any) {
		// The pipeline fills its own two commands; they become the
		// replies only if it returned within ctx (rediswire.Bounded).
		var a, w *redis.Cmd
		if !rediswire.Bounded(ctx, node, func() {
			_, _ = node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				if asking {
					pipe.Do(ctx, "asking")
				}
				a = rediswire.Once(ctx, pipe, rediswire.ScriptArgs(name, body, keys, args)...)
				w = pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
				return nil
			})
		}) {
			a, w = rediswire.Late(ctx), rediswire.Late(ctx)
		}
		acq, wait = a, w
	}
	run("evalsha", script.Hash())
	if rediswire.IsNoScript(acq.Err()) {
		run("eval", src)
	}
	return acq, wait
}

// followRedirect is the Cluster master that a MOVED or ASK reply (err) names,
// and whether it was ASK; nil when err is neither. A redirect is a refusal:
// the server ran nothing, so resending is no replay (guarantee 7). MOVED also
// makes the cluster client reload its slot map, as its own commands do. A
// redirect to an address that is no master of the map is an error naming it.
func (b *redisBackend) followRedirect(ctx context.Context, err error) (*redis.Client, bool, error) {
	if err == nil {
		return nil, false, nil
	}
	addr, moved := redis.IsMovedError(err)
	ask := false
	if !moved {
		if addr, ask = redis.IsAskError(err); !ask {
			return nil, false, nil
		}
	}
	if moved {
		b.cluster.ReloadState(ctx)
	}
	var (
		mu    sync.Mutex
		found *redis.Client
	)
	lerr := b.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	switch {
	case lerr != nil:
		return nil, false, fmt.Errorf("%w (looking up %s: %w)", err, addr, lerr)
	case found == nil:
		return nil, false, fmt.Errorf("%w (%s is not a master of the slot map)", err, addr)
	}
	return found, ask, nil
}

// CanBatch: a plain client (single node, or Sentinel's failover client)
// talks to one server, which holds every key; a Cluster client only when all
// keys hash to one slot (a script's keys must). Other clients (a Ring shards
// keys over servers) take sets one by one.
func (b *redisBackend) CanBatch(keys []string) bool {
	switch b.rdb.(type) {
	case *redis.Client:
		return true
	case *redis.ClusterClient:
		slot := policy.ClusterSlot(keys[0])
		for _, k := range keys[1:] {
			if policy.ClusterSlot(k) != slot {
				return false
			}
		}
		return true
	}
	return false
}

// AcquireAll runs the acquire-all script: every key of reqs or none, one
// round trip. The fence counters of fencing locks go after the lock keys (a
// counter shares its lock's hash tag, so its slot).
func (b *redisBackend) AcquireAll(ctx context.Context, reqs []*driver.Request) ([]int64, error) {
	keys := make([]string, len(reqs), 2*len(reqs))
	args := make([]any, 1, 1+3*len(reqs))
	args[0] = len(reqs)
	for i, req := range reqs {
		keys[i] = req.Key
		fence := "0"
		if req.Fencing {
			keys = append(keys, policy.FenceKey(req.Key))
			fence = "1"
		}
		args = append(args, holder.Value(req.Token, req.Holder), req.TTL.Milliseconds(), fence)
	}
	replicas, timeout := 0, time.Duration(0)
	for _, req := range reqs {
		replicas, timeout = max(replicas, req.Replicas), max(timeout, req.ReplicaTimeout)
	}
	var (
		fences []int64
		err    error
	)
	if replicas > 0 {
		fences, err = b.acquireAllReplicated(ctx, keys, args, reqs, replicas, timeout)
	} else {
		fences, err = rediswire.RunOnce(ctx, b.rdb, rediswire.AcquireAllScript, rediswire.AcquireAllSrc, keys, args...).Int64Slice()
	}
	switch {
	case err == redis.Nil:
		return nil, driver.ErrContended
	case err != nil:
		return nil, redisclass.Mark(rediswire.FenceError(err, keys))
	case len(fences) != len(reqs):
		return nil, fmt.Errorf("acquire-all script returned %d fences for %d locks", len(fences), len(reqs))
	}
	return fences, nil
}

// acquireAllReplicated is AcquireAll with WAIT in the same round trip, for a
// set with a lock that asks for replicas: WAIT counts the replicas that
// acknowledged every write of the script, so the most any lock of the set
// asks for (and the longest timeout) covers them all. Too few: every key is
// released (owner-checked) and the set fails.
func (b *redisBackend) acquireAllReplicated(ctx context.Context, keys []string, args []any, reqs []*driver.Request, replicas int, timeout time.Duration) ([]int64, error) {
	acq, wait, err := b.evalWithWait(ctx, rediswire.AcquireAllScript, rediswire.AcquireAllSrc, keys, args, replicas, timeout)
	if err != nil {
		return nil, err
	}
	fences, err := acq.Int64Slice()
	if err != nil {
		return nil, err // redis.Nil (held) included
	}
	acked, werr := wait.Int64()
	if werr == nil && acked >= int64(replicas) {
		return fences, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cmdTimeout)
	defer cancel()
	for _, req := range reqs {
		_, _ = rediswire.RunOnce(rctx, b.rdb, rediswire.ReleaseScript, rediswire.ReleaseSrc, []string{req.Key}, req.Token).Result()
	}
	if werr != nil {
		return nil, fmt.Errorf("%w: WAIT: %w", rediswire.ErrReplicas, werr)
	}
	return nil, fmt.Errorf("%w: %d of %d within %v; the locks of the set were released", rediswire.ErrReplicas, acked, replicas, timeout)
}

func (b *redisBackend) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	keys := b.extendKeys(key)
	cmd := rediswire.RunOnce(ctx, b.cmds, rediswire.ExtendScript, rediswire.ExtendSrc, keys, token, rediswire.Int(ttl.Milliseconds()))
	if len(keys) > 1 && isTryAgain(cmd.Err()) {
		cmd = rediswire.RunOnce(ctx, b.cmds, rediswire.ExtendScript, rediswire.ExtendSrc, keys[:1], token, rediswire.Int(ttl.Milliseconds()))
	}
	n, err := cmd.Int64()
	return n == 1, redisclass.Mark(err)
}

// isTryAgain reports a Cluster's TRYAGAIN: a command on two keys of a slot
// being migrated, one of them not on this node (the fence counter of a lock
// without fencing never exists). The server ran nothing, so the extend is
// sent again on the lock key alone (no replay: guarantee 7); keeping the
// counter alive is then left to the next extend.
func isTryAgain(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN")
}

// extendKeys are the extend script's keys: the lock and its fence counter,
// which extend keeps as long as the lock (policy.FenceKeepLua; a lock
// without fencing has no counter, and extend then finds none). On a Cluster
// the counter goes only when it shares the lock's slot (a lock key with a
// hash tag, as every key lockkit builds has).
func (b *redisBackend) extendKeys(key string) []string {
	fk := policy.FenceKey(key)
	if b.cluster != nil && policy.ClusterSlot(fk) != policy.ClusterSlot(key) {
		return []string{key}
	}
	return []string{key, fk}
}

// ExtendReplicas sends the extend script and WAIT in one pipeline (one
// round trip) on the node that owns the key: the extend counts only when
// replicas replicas acknowledged it within timeout. When too few did, the
// primary keeps the longer expiry (it delays the next holder, and grants
// nothing) and the caller's deadline stays where it was.
func (b *redisBackend) ExtendReplicas(ctx context.Context, key, token string, ttl time.Duration, replicas int, timeout time.Duration) (bool, error) {
	keys := b.extendKeys(key)
	ext, wait, err := b.evalWithWait(ctx, rediswire.ExtendScript, rediswire.ExtendSrc, keys, []any{token, ttl.Milliseconds()}, replicas, timeout)
	if err == nil && len(keys) > 1 && isTryAgain(ext.Err()) {
		ext, wait, err = b.evalWithWait(ctx, rediswire.ExtendScript, rediswire.ExtendSrc, keys[:1], []any{token, ttl.Milliseconds()}, replicas, timeout)
	}
	if err != nil {
		return false, redisclass.Mark(err)
	}
	n, err := ext.Int64()
	if err != nil || n != 1 {
		return false, redisclass.Mark(err)
	}
	acked, werr := wait.Int64()
	switch {
	case werr != nil:
		return false, fmt.Errorf("%w: WAIT: %w", rediswire.ErrReplicas, werr)
	case acked < int64(replicas):
		return false, fmt.Errorf("%w: %d of %d within %v; the extend does not count", rediswire.ErrReplicas, acked, replicas, timeout)
	}
	return true, nil
}

// ReadHolder runs the holder script: the lock's value (token and
// description) and its fence counter, in one read on the key's node. A read
// changes nothing, so go-redis may re-send it.
func (b *redisBackend) ReadHolder(ctx context.Context, key string) (driver.Holding, bool, error) {
	keys := []string{key, policy.FenceKey(key)}
	var sent *redis.Cmd // read only if the script returned within ctx
	cmd := rediswire.Late(ctx)
	if rediswire.Bounded(ctx, b.rdb, func() { sent = rediswire.HolderScript.Run(ctx, b.rdb, keys) }) {
		cmd = sent
	}
	r, err := cmd.Slice()
	if err == redis.Nil {
		return driver.Holding{}, false, nil
	}
	if err != nil {
		return driver.Holding{}, false, redisclass.Mark(rediswire.FenceError(err, keys))
	}
	if len(r) != 2 {
		return driver.Holding{}, false, fmt.Errorf("holder script returned %d values, want 2", len(r))
	}
	v, _ := r[0].(string)
	h := driver.Holding{}
	c, _ := r[1].(string) // the counter's text: exact past 2^53
	if h.Fence, err = strconv.ParseInt(c, 10, 64); err != nil || h.Fence < 0 {
		return driver.Holding{}, false, rediswire.BadCounter(keys[1], fmt.Sprintf("it holds %q", c))
	}
	h.Token, _, _ = holder.Decode(v)
	if i := len(h.Token) + 1; i < len(v) {
		h.Holder = v[i:]
	}
	return h, true, nil
}

func (b *redisBackend) Release(ctx context.Context, key, token string) (bool, error) {
	n, err := rediswire.RunOnce(ctx, b.cmds, rediswire.ReleaseScript, rediswire.ReleaseSrc, []string{key}, token).Int64()
	return n == 1, redisclass.Mark(err)
}

// Ping sends PING. go-redis dials in a goroutine of its own, so a caller
// whose ctx ends first learns only "context deadline exceeded", even when
// every dial was refused. Ping then names the real cause: it dials the
// server once more with the client's own dialer (Sentinel's master lookup,
// TLS and all), bounded by pingDiagnosis, and adds that dial's error.
func (b *redisBackend) Ping(ctx context.Context) error {
	var pinged error // read only if PING returned within ctx
	err := context.DeadlineExceeded
	if rediswire.Bounded(ctx, b.rdb, func() { pinged = b.rdb.Ping(ctx).Err() }) {
		err = pinged
	} else if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	c, ok := b.rdb.(*redis.Client)
	if !ok || c.Options().Dialer == nil {
		return err
	}
	o := c.Options()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingDiagnosis)
	defer cancel()
	conn, derr := o.Dialer(dctx, o.Network, o.Addr)
	if derr != nil {
		return fmt.Errorf("%w (a new connection fails: %w)", err, derr)
	}
	_ = conn.Close()
	return err
}

// pingDiagnosis bounds Ping's diagnostic dial: a refused or unreachable
// server answers at once; one that accepts slowly adds nothing to say.
const pingDiagnosis = 100 * time.Millisecond

// Close closes the FIFO Notifier, if any; the go-redis client is the caller's.
func (b *redisBackend) Close() error {
	b.closeNotifier()
	return nil
}
