package lockkit

import (
	"context"
	"sync"
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
//
// A commandCtx has an AfterFunc method, which the context package uses for
// context.AfterFunc and for every ctx derived from it. Without one, each of
// those starts a goroutine that waits for Done, as for any ctx the package
// does not know: pgx watches every statement's ctx with context.AfterFunc, so
// each statement of a PostgreSQL acquire or release started a goroutine and
// woke it when the statement ended. On two cores shared with the server, that
// hand-off cost more than all of lockkit's own work (issue 24: acquire +
// release through the Client 2.7–2.9× the advisory-lock floor with it,
// against 1.96–1.99× for the backend alone).

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

	mu    sync.Mutex // guards fired, after and afterN
	fired bool       // done is closed and the functions were started
	after []cmdAfter // registered by AfterFunc, not yet run or stopped
	seq   uint64     // the last registration's id
}

// cmdAfter is one function registered by AfterFunc.
type cmdAfter struct {
	id uint64
	f  func()
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

// AfterFunc arranges for f to run, in a goroutine of its own, once c is
// done (at once if it is), as context.AfterFunc does. stop unregisters f and
// reports whether it did: false once f has been started. f never runs in the
// caller's goroutine: the context package calls this with a lock held that f
// takes.
func (c *commandCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.fired {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.seq++
	id := c.seq
	c.after = append(c.after, cmdAfter{id: id, f: f})
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, a := range c.after {
			if a.id == id {
				c.after = append(c.after[:i], c.after[i+1:]...)
				return true
			}
		}
		return false
	}
}

// finish marks c done (state, then Done closed) and starts the functions
// registered with AfterFunc. It runs once: from the scheduler at the
// deadline, or from commandScope.end.
func (c *commandCtx) finish(state int32) {
	c.state.Store(state)
	close(c.done)
	c.mu.Lock()
	c.fired = true
	after := c.after
	c.after = nil
	c.mu.Unlock()
	for _, a := range after {
		go a.f()
	}
}

// expireCommand is a commandCtx's scheduler entry: the deadline passed.
func expireCommand(arg any) {
	arg.(*commandCtx).finish(cmdExpired)
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
		s.cc.finish(cmdEnded)
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

// settleCtx waits for ctx to say it ended when its deadline has passed but
// its timer has not fired yet. A command under a ctx with a deadline can
// fail at that deadline before ctx.Err() does: go-redis sets the deadline
// on the socket, and the read's timeout can come before the context's own
// timer. Checked right after such a failure, ctx.Err() is still nil, and
// the caller's deadline read as the backend's failure (ErrUnavailable,
// which retries nothing and trips nothing, but says the wrong thing). The
// wait is bounded: a ctx that reports a deadline its Done never follows is
// left as it is after settleWait.
func settleCtx(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	d, ok := ctx.Deadline()
	if !ok || time.Now().Before(d) {
		return
	}
	t := time.NewTimer(settleWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// settleWait bounds settleCtx's wait.
const settleWait = 100 * time.Millisecond
