package rediswire

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// No replay behind lockkit's back (docs/semantics.md, guarantee 7, "The
// go-redis client"). go-redis re-sends a command after a network error or a
// read timeout (MaxRetries, 3 by default; a Cluster client also retries on
// the same node, then another, up to MaxRedirects). Lockkit's commands are
// not idempotent: a re-sent acquire finds the key held by its own token
// (reported as contention, the key held by a lease nobody owns), a re-sent
// release finds it gone (reported as a loss). So every state-changing
// command is sent with Once or RunOnce (a onceCmd): go-redis never re-sends a command whose
// NoRetry is true once it may have reached the server, on any client type.
// A MOVED, ASK, READONLY or NOSCRIPT reply still leads to a new send: the
// server did not run it.
//
// The caller's client is used as it is (its hooks, its Sentinel failover
// tracking, its Cluster slot map): a copy built from its Options would lose
// all three. What the copy would have fixed is the I/O bound: go-redis
// bounds a command by the ctx deadline only with ContextTimeoutEnabled, and
// by ReadTimeout (3s by default) otherwise. goredis.New warns once when it is
// off.

// onceCmd is a command go-redis sends at most once (see above).
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// Once sends args as a onceCmd on c.
func Once(ctx context.Context, c Processor, args ...any) *redis.Cmd {
	cmd := onceCmd{redis.NewCmd(ctx, args...)}
	_ = c.Process(ctx, cmd)
	return cmd.Cmd
}

// Processor is what sends a command: a client, or a pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RunOnce is script.Run sent as onceCmds: EVALSHA, then EVAL after a
// NOSCRIPT (which the server answers without running anything).
func RunOnce(ctx context.Context, c Processor, script *redis.Script, src string, keys []string, args ...any) *redis.Cmd {
	cmd := Once(ctx, c, ScriptArgs("evalsha", boxedHash(script), keys, args)...)
	if IsNoScript(cmd.Err()) {
		cmd = Once(ctx, c, ScriptArgs("eval", src, keys, args)...)
	}
	return cmd
}

// IsNoScript reports a NOSCRIPT reply. The nil check comes first:
// redis.HasErrorPrefix allocates even for a nil error.
func IsNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// boxedHashes holds each script's EVALSHA hash as an interface value, boxed
// once: boxing the string for every command costs an allocation.
var boxedHashes sync.Map // *redis.Script → any (the hash)

func boxedHash(s *redis.Script) any {
	if h, ok := boxedHashes.Load(s); ok {
		return h
	}
	h, _ := boxedHashes.LoadOrStore(s, any(s.Hash()))
	return h
}

func ScriptArgs(name string, body any, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}
