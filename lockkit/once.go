package lockkit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Guarantee 7 with any go-redis client (docs/semantics.md, "The client you
// pass"). go-redis re-sends a command after a network error or a read
// timeout (MaxRetries, 3 by default; a Cluster client also retries on
// another node up to MaxRedirects), and bounds I/O by ReadTimeout (3s)
// rather than the ctx deadline unless ContextTimeoutEnabled is on. Lockkit's
// commands are not idempotent: a re-sent acquire finds the key held by its
// own token (reported as contention, the key held by a lease nobody owns), a
// re-sent release finds it gone (reported as a loss). So:
//
//   - the backend runs on its own client built from the caller's options
//     (ownClient): MaxRetries -1, ContextTimeoutEnabled on, one dial attempt
//     of at most the command timeout; its pool is separate and closed with
//     the Client;
//   - every state-changing command is sent as a onceCmd, which go-redis
//     never re-sends once it may have reached the server (its NoRetry flag),
//     on any client type, a Cluster's redirect loop included. A MOVED, ASK or
//     NOSCRIPT reply still leads to a new send: the server did not run it.

// ownClient is a client like rdb, configured so that every command is sent
// at most once and bounded by its ctx deadline. Other client types (a Ring,
// a user's own UniversalClient) are used as they are: onceCmd still keeps
// them from re-sending, but their I/O bound is their own ReadTimeout.
func ownClient(rdb redis.UniversalClient, cmdTimeout time.Duration) (redis.UniversalClient, bool) {
	switch c := rdb.(type) {
	case *redis.Client:
		o := *c.Options()
		o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		o.DialerRetries, o.DialTimeout = 1, boundDial(o.DialTimeout, cmdTimeout)
		return redis.NewClient(&o), true
	case *redis.ClusterClient:
		o := *c.Options()
		o.MaxRetries, o.ContextTimeoutEnabled = -1, true
		o.DialerRetries, o.DialTimeout = 1, boundDial(o.DialTimeout, cmdTimeout)
		return redis.NewClusterClient(&o), true
	}
	return rdb, false
}

// boundDial is a dial timeout no longer than the command timeout (a command
// that has to dial first is still bounded by it).
func boundDial(dial, cmdTimeout time.Duration) time.Duration {
	if dial <= 0 || dial > cmdTimeout {
		return cmdTimeout
	}
	return dial
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
