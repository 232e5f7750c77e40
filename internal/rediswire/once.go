package rediswire

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

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

// Once sends args as a onceCmd on c, bounded by ctx (Bounded, or, on a
// Queue, its wait).
func Once(ctx context.Context, c Processor, args ...any) *redis.Cmd {
	cmd := onceCmd{redis.NewCmd(ctx, args...)}
	if q, ok := c.(Queue); ok {
		return viaQueue(ctx, q, cmd, args)
	}
	if sendsInline(ctx, c) {
		// Bounded would send it here too; calling it with a closure
		// would cost one allocation a command (the closure escapes to
		// Bounded's goroutine).
		_ = c.Process(ctx, cmd)
		return cmd.Cmd
	}
	if !Bounded(ctx, c, func() { _ = c.Process(ctx, cmd) }) {
		return Late(ctx, args...)
	}
	return cmd.Cmd
}

// Bounded runs send, a command or pipeline on c, and reports whether it
// returned before ctx ended. A client with ContextTimeoutEnabled bounds its
// I/O by ctx's deadline itself, and send runs on the caller's goroutine. One
// without it (go-redis's default, and what redis.ParseURL gives) waits on a
// stalled server for its ReadTimeout (3s by default), whatever ctx says: for
// such a client send runs on a goroutine of its own, and when ctx ends first
// Bounded returns false at once; send goes on until the client's own timeout,
// and the caller must not read what send fills (guarantee 7: a lock command
// returns within the command timeout with any client). A command left so has
// an unknown outcome, as any timed-out one: the caller treats it as such.
func Bounded(ctx context.Context, c any, send func()) bool {
	if sendsInline(ctx, c) {
		send()
		return true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		send()
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendsInline reports whether Bounded sends on the caller's goroutine: ctx
// cannot end, or c bounds its I/O by ctx itself.
func sendsInline(ctx context.Context, c any) bool {
	return ctx.Done() == nil || boundsByCtx(c)
}

// Queue is a Processor that queues a command for a later batch and waits
// for its reply (go-redis's autopipelining, on its deferred face: package
// goredis/autopipeline). Send waits until the reply came or ctx ended, and
// reports which: true when cmd holds its reply. A command is not cancelled
// once queued: when ctx ends first, it is left as Bounded leaves one, its
// outcome unknown, and the caller must not read cmd. A Queue sends a batch
// holding a NoRetry command at most once, as a client does the command, and
// sends its batches in order: whatever the caller sends next (a give-back)
// runs after it.
type Queue interface {
	Processor
	Send(ctx context.Context, cmd redis.Cmder) bool
}

// viaQueue sends cmd on q, bounded by ctx.
func viaQueue(ctx context.Context, q Queue, cmd onceCmd, args []any) *redis.Cmd {
	if ctx.Err() != nil {
		// Not queued: a client sends nothing under an ended ctx either.
		return Late(ctx, args...)
	}
	if !q.Send(ctx, cmd) {
		return Late(ctx, args...)
	}
	return cmd.Cmd
}

// Late is the reply of a command that Bounded left when ctx ended: ctx's
// error, as a client bounding I/O by ctx would have returned.
func Late(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetErr(ctx.Err())
	return cmd
}

// boundsByCtx reports a client that bounds its I/O by the ctx deadline
// (ContextTimeoutEnabled), or a pipeline, whose commands are only queued
// (its Exec is bounded where it is called). Any other client is not trusted
// to.
func boundsByCtx(c any) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	case redis.Pipeliner:
		return true
	}
	return false
}

// Processor is what sends a command: a client, or a pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RunOnce is script.Run sent as onceCmds: EVALSHA, then EVAL after a
// NOSCRIPT (which the server answers without running anything).
func RunOnce(ctx context.Context, c Processor, script *redis.Script, src string, keys []string, args ...any) *redis.Cmd {
	return RunArgs(ctx, c, script, src, ScriptArgs("", nil, keys, args))
}

// RunArgs is RunOnce for a caller that lays out the command itself, as
// ScriptArgs does; a's first two elements (the command and the script) are
// set here.
func RunArgs(ctx context.Context, c Processor, script *redis.Script, src string, a []any) *redis.Cmd {
	a[0], a[1] = "evalsha", boxedHash(script)
	cmd := Once(ctx, c, a...)
	if IsNoScript(cmd.Err()) {
		// The EVALSHA was answered, so nothing reads a any more; the EVAL
		// gets a copy all the same (this is rare: once per script and server).
		a = slices.Clone(a)
		a[0], a[1] = "eval", src
		cmd = Once(ctx, c, a...)
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

// Int is n as a command argument. Boxing an int64 of 256 or more costs an
// allocation, and the numbers lock commands carry are few and repeat on
// every command (a domain's TTL in ms, the FIFO waiter TTL), so their boxes
// are kept in a small table, each slot holding the last number hashed to it
// (a miss costs what boxing costs, plus the slot's entry). Entries are
// never changed once stored; a slot is replaced atomically.
func Int(n int64) any {
	slot := &boxedInts[(uint64(n)*0x9e3779b97f4a7c15)>>(64-boxedIntBits)]
	if e := slot.Load(); e != nil && e.n == n {
		return e.v
	}
	e := &boxedInt{n: n, v: n}
	slot.Store(e)
	return e.v
}

const boxedIntBits = 8

type boxedInt struct {
	n int64
	v any // n, boxed
}

var boxedInts [1 << boxedIntBits]atomic.Pointer[boxedInt]

// ScriptArgs lays out a script's command: name (EVAL or EVALSHA), body (the
// source or its hash), the number of keys, keys, then args.
func ScriptArgs(name string, body any, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, body, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}
