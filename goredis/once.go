package goredis

import (
	"context"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/redis/go-redis/v9"
)

// No replay behind lockkit's back (docs/semantics.md, guarantee 7, "The
// go-redis client"). go-redis re-sends a command after a network error or a
// read timeout (MaxRetries, 3 by default; a Cluster client also retries on
// the same node, then another, up to MaxRedirects). Lockkit's commands are
// not idempotent: a re-sent acquire finds the key held by its own token
// (reported as contention, the key held by a lease nobody owns), a re-sent
// release finds it gone (reported as a loss). So every state-changing
// command is sent as a onceCmd: go-redis never re-sends a command whose
// NoRetry is true once it may have reached the server, on any client type.
// A MOVED, ASK, READONLY or NOSCRIPT reply still leads to a new send: the
// server did not run it.
//
// The caller's client is used as it is (its hooks, its Sentinel failover
// tracking, its Cluster slot map): a copy built from its Options would lose
// all three. What the copy would have fixed is the I/O bound: go-redis
// bounds a command by the ctx deadline only with ContextTimeoutEnabled, and
// by ReadTimeout (3s by default) otherwise. New warns once when it is off
// (warnClient).

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

// onceCmd is a command go-redis sends at most once (see above).
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// once sends args as a onceCmd on c.
func once(ctx context.Context, c processor, args ...any) *redis.Cmd {
	cmd := onceCmd{redis.NewCmd(ctx, args...)}
	_ = c.Process(ctx, cmd)
	return cmd.Cmd
}

// processor is what sends a command: a client, or a pipeline.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// runOnce is script.Run sent as onceCmds: EVALSHA, then EVAL after a
// NOSCRIPT (which the server answers without running anything).
func runOnce(ctx context.Context, c processor, script *redis.Script, src string, keys []string, args ...any) *redis.Cmd {
	cmd := once(ctx, c, scriptArgs("evalsha", script.Hash(), keys, args)...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = once(ctx, c, scriptArgs("eval", src, keys, args)...)
	}
	return cmd
}

func scriptArgs(name, body string, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}
