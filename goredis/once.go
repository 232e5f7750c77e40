package goredis

import (
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
)

// Every state-changing command is sent at most once (docs/semantics.md,
// guarantee 7): rediswire.Once and rediswire.RunOnce, which say why. The
// caller's client is used as it is; go-redis bounds a command by the ctx
// deadline only with ContextTimeoutEnabled, and New warns once when it is
// off (warnClient).

// warnClient warns, through the Client's logger, when rdb ignores ctx
// deadlines, so a stalled server holds a command for its ReadTimeout rather
// than the command timeout.
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
		cfg.Warn("lockkit: the go-redis client has ContextTimeoutEnabled off, so a stalled Redis holds each lock command for the client's ReadTimeout, not the command timeout; set ContextTimeoutEnabled: true in its options",
			"read_timeout", read, "command_timeout", cfg.CommandTimeout)
	}
}
