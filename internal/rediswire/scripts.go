// Package rediswire is the Redis backend's layout on the wire: its Lua
// scripts (acquire, acquire-all, extend, release, holder) and the error of a grant
// too few replicas acknowledged. goredis sends them; tests that look at the
// commands on the wire (hooks, MONITOR) name them from here.
package rediswire

import (
	"context"
	_ "embed"
	"errors"
	"strings"

	"github.com/lockkit/lockkit/internal/holder"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireBody   string
	AcquireSrc    = policy.NextFenceLua + acquireBody
	AcquireScript = redis.NewScript(AcquireSrc)

	// Acquire all takes a set of locks that live in one place (DoAll's
	// batched path): all of them or none, fences by the same rule.
	//go:embed acquire_all.lua
	acquireAllBody   string
	AcquireAllSrc    = policy.NextFenceLua + acquireAllBody
	AcquireAllScript = redis.NewScript(AcquireAllSrc)

	// Release and extend check the owner exactly: the value is the lease's
	// token, or its token followed by ';' and a holder description
	// (internal/holder owns that format and its owns() check).
	//go:embed release.lua
	releaseBody   string
	ReleaseSrc    = holder.OwnsLua + releaseBody
	ReleaseScript = redis.NewScript(ReleaseSrc)

	// Redlock acquire is one node's vote: SET NX PX, refused while the
	// node is quarantined after a restart or a loss of its data (its
	// marker, policy.RedlockMarker).
	//go:embed redlock_acquire.lua
	RedlockAcquireSrc    string
	RedlockAcquireScript = redis.NewScript(RedlockAcquireSrc)

	//go:embed extend.lua
	extendBody   string
	ExtendSrc    = holder.OwnsLua + policy.FenceKeepLua + extendBody
	ExtendScript = redis.NewScript(ExtendSrc)

	// Holder reads who holds a lock and its fence (an election's Leader).
	//go:embed holder.lua
	holderBody   string
	HolderSrc    = policy.BadFenceLua + holderBody
	HolderScript = redis.NewScript(HolderSrc)
)

// MarkRedlockNode marks a new Redlock node as an operator would
// (docs/deployments.md, "A new Redlock node"): its marker says that its
// current life began long ago, so it votes at once. Only for a node that
// has never served a lock, or whose every lock has expired: a test's new
// redis-server. A server whose INFO gives no run_id (miniredis) is marked
// as the acquire script marks it, with "-".
func MarkRedlockNode(ctx context.Context, c redis.Cmdable) error {
	run := "-"
	if info, err := c.Info(ctx, "server").Result(); err == nil {
		if _, rest, ok := strings.Cut(info, "run_id:"); ok {
			run, _, _ = strings.Cut(rest, "\r\n")
		}
	}
	return c.Set(ctx, policy.RedlockMarker, run+" 0", 0).Err()
}

// ErrReplicas is an acquisition or extend whose write too few replicas
// acknowledged.
var ErrReplicas = errors.New("too few replicas acknowledged the lock")
