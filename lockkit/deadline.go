package lockkit

import (
	"context"
	"sync/atomic"
	"time"
)

// Every backend command of a lock operation runs under a ctx whose Done
// channel is closed at the deadline by a real timer, not a ctx that only
// reports a deadline (which saved about 8µs of an 85µs acquire+release on
// loopback, and is not enough). go-redis, for one, turns a ctx deadline into the
// connection's read and write deadlines, but it opens a connection in a
// goroutine of its own, retrying the dial DialerRetries times (5) with
// DialerRetryTimeout (100ms) between attempts, and the caller leaves that
// wait only when ctx.Done fires. Without a timer, a TryDo on a Redis that
// refuses connections took the whole dial loop (411ms at a 200ms command
// timeout; 1.71s at 500ms when go-redis also re-sent the command) instead of
// the command timeout: TestRedisDownRefused.
//
// That timer need not be a runtime timer of its own. A command whose parent
// ctx can never end (context.Background, or context.WithoutCancel as a
// release uses) runs under a commandCtx: its Done channel is closed at the
// deadline by the client's scheduler, the one runtime timer that also runs
// lease deadlines and renewals. context.WithTimeout costs five allocations
// (the ctx, its timer, the timer's func, the cancel func, the channel) and a
// runtime timer armed and stopped per command; a commandCtx costs two (the
// ctx and its channel) and a place in the scheduler's heap. A parent that can
// end takes context.WithTimeout, which also follows the parent.

// commandCtx is the ctx of one command (see above): the parent's values, a
// deadline, and a Done channel closed by the scheduler at the deadline, or
// by end.
type commandCtx struct {
	parent   context.Context // never done: Done() == nil
	deadline time.Time
	done     chan struct{}
	state    atomic.Int32 // cmdLive, then cmdExpired or cmdEnded, before done closes
	sched    *scheduler
	entry    schedEntry
}

const (
	cmdLive int32 = iota
	cmdExpired
	cmdEnded
)

func (c *commandCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *commandCtx) Done() <-chan struct{}       { return c.done }
func (c *commandCtx) Value(key any) any           { return c.parent.Value(key) }

func (c *commandCtx) Err() error {
	switch c.state.Load() {
	case cmdExpired:
		return context.DeadlineExceeded
	case cmdEnded:
		return context.Canceled
	}
	return nil
}

// expireCommand is a commandCtx's scheduler entry: the deadline passed.
func expireCommand(arg any) {
	c := arg.(*commandCtx)
	c.state.Store(cmdExpired)
	close(c.done)
}

// commandScope ends what withCommandTimeout started: a commandCtx, or a
// context.WithTimeout.
type commandScope struct {
	cc     *commandCtx
	cancel context.CancelFunc
}

// end ends the command's ctx, as a cancel func would: whatever still holds
// it (a goroutine go-redis derived from it) sees it done.
func (s commandScope) end() {
	if s.cc == nil {
		s.cancel()
		return
	}
	// The entry leaves the queue here or is being run: one of the two
	// closes done, once.
	if s.cc.sched.stop(&s.cc.entry) {
		s.cc.state.Store(cmdEnded)
		close(s.cc.done)
	}
}

// withCommandTimeout bounds one command by d with a timer (see above).
func (c *Client) withCommandTimeout(ctx context.Context, d time.Duration) (context.Context, commandScope) {
	if _, has := ctx.Deadline(); has || ctx.Done() != nil {
		cctx, cancel := context.WithTimeout(ctx, d)
		return cctx, commandScope{cancel: cancel}
	}
	cc := &commandCtx{parent: ctx, deadline: time.Now().Add(d), done: make(chan struct{}), sched: &c.sched}
	cc.entry = schedEntry{run: expireCommand, arg: cc}
	c.sched.add(&cc.entry, cc.deadline)
	return cc, commandScope{cc: cc}
}
