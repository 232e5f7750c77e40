package lockkit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/telnames"
)

// waiterOf is be's wait in its store's own queue: the Client's guarded
// backend when it has one (PostgreSQL), nil otherwise.
func (c *Client) waiterOf(be driver.Backend) driver.Waiter {
	if c.waiter != nil && be == c.be {
		return c.waiter
	}
	return nil
}

// acquireServerQueue is acquire for a FIFO domain on a backend whose store
// queues blocked requests itself (driver.Waiter): one request that waits in
// the store's queue, in arrival order, for at most what is left of MaxWait,
// and ends with ctx or Close. Only a backend error sends another, after
// policy.FIFOFallback, within MaxWait.
//
// The lease counts from the request's send + the time the store says it
// waited before the grant (driver.Waiter): a grant after a long wait is not
// counted from the send (it would be nearly spent, or refused as too late),
// and not from the reply either, since the store's TTL (PostgreSQL's idle
// clock) starts before the reply arrives.
func (l Lock) acquireServerQueue(ctx, hctx, actx context.Context, hold *obs.Hold, be driver.Backend, w driver.Waiter, forDo bool) (*Lease, context.Context, error) {
	d := l.d
	c, p := d.c, &d.policy
	start := time.Now()
	wctx, stop := c.waitCtx(actx)
	defer stop()
	var (
		attempts  int
		contended bool
	)
	fail := func(o telnames.Outcome, err error) (*Lease, context.Context, error) {
		hold.EndAcquire(obs.AcquireResult{Outcome: o, Attempts: attempts, Contended: contended, Err: err})
		hold.End(o, err)
		return nil, ctx, err
	}
	for {
		left := p.Retry.MaxWait - time.Since(start)
		if left < time.Millisecond {
			return fail(telnames.OutcomeTimeout, l.finalError(ErrNotAcquired, attempts, start, true))
		}
		attempts++
		token := rand.Text()
		req := &driver.Request{Key: l.key, Token: token, Holder: c.holderOf(hctx), TTL: p.TTL, Fencing: p.Fencing}
		sent := time.Now()
		fence, waited, err := w.AcquireWait(wctx, req, left)
		if err == nil {
			// A wait of more than a millisecond in the queue means the lock
			// was held when the request arrived.
			contended = contended || waited > time.Millisecond
			var (
				lease *Lease
				fctx  context.Context
			)
			lease, fctx, err = l.grant(ctx, hctx, hold, be, granted{token: token, fence: fence, sent: sent.Add(waited), attempts: attempts, contended: contended}, forDo)
			if err == nil || err == ErrClosed {
				return lease, fctx, err
			}
		}
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, driver.ErrContended) && !errors.Is(err, breaker.ErrOpen) {
			// The request may have been granted although its reply was
			// lost, or came after its caller left (ctx ended, or Close):
			// give the token back, in the background. (grant's errors wrap
			// ErrUnavailable: it gave its token back itself.)
			l.giveBackLater(ctx, be, token)
		}
		settleCtx(ctx) // a failure at ctx's deadline is ctx's ending
		switch {
		case ctx.Err() != nil:
			return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
		case wctx.Err() != nil: // the client closed
			return fail(telnames.OutcomeClosed, ErrClosed)
		case errors.Is(err, driver.ErrContended):
			contended = true
			// The store's wait ends before the caller's ctx does, keeping
			// time for the reply: when that, not MaxWait, ended it, the
			// wait is over at ctx's end (its error, not contention), or at
			// MaxWait if that comes first. (The last stretch is not spent
			// in the queue: at most the command timeout.)
			if rest := p.Retry.MaxWait - time.Since(start); rest >= time.Millisecond && !c.pause(ctx, rest) {
				if ctx.Err() == nil {
					return fail(telnames.OutcomeClosed, ErrClosed)
				}
				return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
			}
			return fail(telnames.OutcomeTimeout, l.finalError(ErrNotAcquired, attempts, start, true))
		}
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if errors.Is(err, breaker.ErrOpen) || errors.Is(err, driver.ErrFinal) {
			return fail(attemptOutcome(err, telnames.OutcomeContended), l.finalError(err, attempts, start, false))
		}
		wait := min(policy.FIFOFallback, p.Retry.MaxWait-time.Since(start))
		if wait <= 0 {
			return fail(attemptOutcome(err, telnames.OutcomeTimeout), l.finalError(err, attempts, start, true))
		}
		hold.Retry(attempts, wait, attemptOutcome(err, telnames.OutcomeContended))
		if !c.pause(ctx, wait) {
			if ctx.Err() == nil {
				return fail(telnames.OutcomeClosed, ErrClosed)
			}
			return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
		}
	}
}
