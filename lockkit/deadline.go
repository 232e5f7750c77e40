package lockkit

import (
	"context"
	"time"
)

// commandCtx bounds one Redis command of the hot path (acquire, release)
// with a deadline but arms no timer. go-redis (with ContextTimeoutEnabled)
// turns ctx.Deadline() into the connection's read and write deadlines, so
// the command still times out there; what is saved is the runtime timer a
// context.WithTimeout adds and deletes per command, which wakes the network
// poller and cost about 8µs of an 85µs acquire+release on loopback. The
// parent's cancellation still reaches the command through Done.
//
// Only the I/O is bounded this way: waiting for a free pool connection is
// bounded by the pool's own timeout, as before.
func commandCtx(parent context.Context, d time.Duration) context.Context {
	return deadlineCtx{Context: parent, deadline: time.Now().Add(d)}
}

type deadlineCtx struct {
	context.Context
	deadline time.Time
}

// Deadline is the earlier of the command's deadline and the parent's.
func (c deadlineCtx) Deadline() (time.Time, bool) {
	if pd, ok := c.Context.Deadline(); ok && pd.Before(c.deadline) {
		return pd, true
	}
	return c.deadline, true
}
