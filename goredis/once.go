package goredis

import (
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
)

// Every state-changing command is sent at most once (docs/semantics.md,
// guarantee 7): rediswire.Once and rediswire.RunOnce, which say why. The
// caller's client is used as it is; go-redis bounds a command by the ctx
// deadline only with ContextTimeoutEnabled, so without it each command runs
// on a goroutine of its own and is left at the deadline (rediswire.Bounded),
// and New warns once (warnClient).

// warnClient warns, through the Client's logger, when rdb ignores ctx
// deadlines: lockkit then bounds each command itself, with a goroutine per
// command, and a command left at its deadline keeps its connection busy for
// the client's ReadTimeout.
func warnClient(rdb redis.UniversalClient, cfg driver.Config) {
	if cfg.Warn == nil {
		return
	}
	var on bool
	var read time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		on, read = c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	case *redis.ClusterClient:
		on, read = c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	default:
		return
	}
	if !on && read > cfg.CommandTimeout {
		cfg.Warn("lockkit: the go-redis client has ContextTimeoutEnabled off, so lockkit bounds each lock command by the command timeout itself (a goroutine per command), and a command left at its deadline on a stalled Redis keeps its connection busy for the client's ReadTimeout; set ContextTimeoutEnabled: true in its options",
			"read_timeout", read, "command_timeout", cfg.CommandTimeout)
	}
}
