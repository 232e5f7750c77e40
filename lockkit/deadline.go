package lockkit

// Every Redis command of a lock operation runs under a ctx made by
// context.WithTimeout, a real timer, not a ctx that only reports a deadline
// (this file's former commandCtx, which saved about 8µs of an 85µs
// acquire+release on loopback). go-redis turns a ctx deadline into the
// connection's read and write deadlines, but it opens a connection in a
// goroutine of its own, retrying the dial DialerRetries times (5) with
// DialerRetryTimeout (100ms) between attempts, and the caller leaves that
// wait only when ctx.Done fires. Without a timer, a TryDo on a Redis that
// refuses connections took the whole dial loop (411ms at a 200ms command
// timeout; 1.71s at 500ms when go-redis also re-sent the command) instead of
// the command timeout: TestRedisDownRefused.
