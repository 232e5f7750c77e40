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
	"go.opentelemetry.io/otel/trace"
)

// queueOf is be's FIFO queue: the Client's guarded backend when it keeps
// queues, nil otherwise (Redlock, PostgreSQL, a transaction's backend).
func (c *Client) queueOf(be driver.Backend) driver.Queue {
	if c.queue != nil && be == c.be {
		return c.queue
	}
	return nil
}

// acquireFIFO is acquire for a domain with FIFO waiting (Policy.Wait): one
// token for the whole wait, so that it keeps its place in the queue. Each
// attempt is one script that grants the lock to the head of the queue, or
// joins (or refreshes) the token's place; between attempts the token waits
// for a push (a release that hands it the lock, or wakes it) or for its
// fallback timer. A wait that ends without a lease leaves the queue at once,
// which hands the lock to the next waiter when it is free.
func (l Lock) acquireFIFO(ctx, hctx, actx context.Context, hold *obs.Hold, be driver.Backend, q driver.Queue, retry, forDo bool) (*Lease, context.Context, error) {
	d := l.d
	c, p := d.c, &d.policy
	start := time.Now()
	token := rand.Text()
	// One allocation for the request and the lease it may become (the
	// first grant; a later one, after a rejoin, makes its own).
	pl := new(pendingLease)
	req := &pl.req
	*req = driver.Request{Key: l.key, Token: token, Holder: c.holderOf(hctx), TTL: p.TTL, Fencing: p.Fencing}
	retry = retry && p.Retry.retries()
	var (
		attempts  int
		contended bool
		queued    bool // the token may be in the queue (or hold the lock): leave on the way out
		w         driver.QueueWaiter
		wctx      context.Context // ctx, also ended by Close; made at the first wait
		// The last answer that found the token queued: its place (Joined)
		// and its send. That attempt ran before any handover to that
		// place, so a pushed grant for it counts from queuedSent.
		joined     int64
		queuedSent time.Time
	)
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	fail := func(o telnames.Outcome, err error) (*Lease, context.Context, error) {
		if queued {
			// At once, bounded by the command timeout and not by ctx (which
			// may be what ended the wait): the next waiter may be woken by it.
			// Unanswered, it goes on in the background (the token may hold
			// the lock: a grant whose reply was lost).
			l.dropToken(ctx, be, token)
		}
		hold.EndAcquire(obs.AcquireResult{Outcome: o, Attempts: attempts, Contended: contended, Err: err})
		hold.End(o, err)
		return nil, ctx, err
	}
	// take turns a grant into a lease: one an attempt observed, or a
	// handover's push for the token's place in the queue. rejoin is
	// true when a handed-over lock expired before it could be extended:
	// the token is no longer the holder, and the next attempt rejoins the
	// queue (the wait goes on within MaxWait and ctx).
	take := func(r driver.QueueResult, base time.Time) (lease *Lease, fctx context.Context, err error, rejoin bool) {
		// base is a local time no later than the server's start of the
		// lock's LockTTL: the lease is trusted until base + LockTTL − drift.
		validUntil := base.Add(r.LockTTL - d.drift)
		var firstRenew time.Duration
		if r.Earlier {
			// A handover gives the lock for min(TTL, waiter TTL) from the
			// release, which came after base: the lease must be extended to
			// its full TTL before validUntil. The first renewal does it
			// when it can land in time (a short hold never pays for it);
			// otherwise extend now.
			need := time.Until(validUntil) - c.cmdTimeout // an extend sent later may land too late
			switch {
			case p.Renew > 0 && p.Renew <= need:
				// The usual schedule renews in time.
			case p.Renew > 0 && need > c.cmdTimeout:
				firstRenew = need / 2
			default:
				// Not past the max hold, counted from base as the
				// lease's own (initLease): a whole TTL from now could
				// pass it by the time the waiter waited.
				esent := time.Now()
				ettl, _, none := d.extendTTL(d.holdEnd(base), esent)
				if none {
					break // validUntil is before the cap already
				}
				ectx, cancel := context.WithTimeout(actx, c.cmdTimeout)
				ok, err := be.Extend(ectx, l.key, token, ettl)
				cancel()
				switch {
				case err == nil && ok:
					validUntil = esent.Add(ettl - d.drift)
				case err == nil:
					// Expired under us (a paused waiter): not a grant any
					// more. The next attempt rejoins at the tail.
					return nil, nil, nil, true
				case time.Until(validUntil) <= 0:
					// Unknown whether it is still held: the next attempt
					// finds out (and retries the backend as any attempt).
					return nil, nil, nil, true
				}
			}
		}
		if r.Previous != "" {
			hold.LinkPrevious(r.Previous)
		}
		var into *Lease
		if pl != nil {
			into, pl = &pl.lease, nil // a grant uses the lease's memory once
		}
		// grant refuses a grant that came too late to trust (validUntil
		// passed): it gives the lock back through the queue, which hands it
		// on, so there is nothing left to leave.
		lease, fctx, err = l.grant(ctx, hctx, hold, be, granted{
			token: token, fence: r.Fence, sent: base, validUntil: validUntil, attempts: attempts, contended: contended,
			queue: q, firstRenew: firstRenew, into: into,
		}, forDo)
		switch {
		case retry && isTooLate(err):
			// Given back, and handed on: the token holds nothing. The
			// next attempt joins again at the tail, as after a handover
			// that expired (a waiter paused between the grant and here).
			// A single attempt ends here, as below.
			return nil, nil, nil, true
		case err != nil && err != ErrClosed:
			queued = false
			lease, fctx, err = fail(telnames.OutcomeUnavailable, fmt.Errorf("lockkit: acquire %s: %w", l.key, err))
		}
		return lease, fctx, err, false
	}
	for {
		attempts++
		sent := time.Now()
		r, err := q.QueueAcquire(actx, req)
		if err == nil && r.Granted {
			// A direct grant has the full TTL from this send; a handover
			// found here has LockTTL left, measured after this send.
			lease, fctx, err, rejoin := take(r, sent)
			if !rejoin {
				return lease, fctx, err
			}
			queued = true
			joined = 0 // that place is gone, as after a push's rejoin below
			if !retry {
				// A single attempt: the handover expired under it.
				return fail(telnames.OutcomeContended, l.notAcquired())
			}
			if ctx.Err() != nil {
				return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
			}
			if mw := p.Retry.MaxWait; mw > 0 && time.Since(start) >= mw {
				return fail(telnames.OutcomeTimeout, l.finalError(ErrNotAcquired, attempts, start, true))
			}
			continue
		}
		var wait time.Duration
		if err != nil {
			if !errors.Is(err, breaker.ErrOpen) {
				queued = true // it may have run: leaving undoes a grant or a place
			}
			err = unavailable(err)
			settleCtx(ctx) // a failure at ctx's deadline is ctx's ending
			if ctx.Err() != nil {
				return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
			}
			if !retry || errors.Is(err, breaker.ErrOpen) || errors.Is(err, driver.ErrFinal) {
				return fail(attemptOutcome(err, telnames.OutcomeContended), l.finalError(err, attempts, start, false))
			}
			wait = policy.FIFOFallback
		} else {
			queued = true
			joined, queuedSent = r.Joined, sent
			if attempts == 1 {
				contended = true
			}
			if !retry {
				return fail(telnames.OutcomeContended, l.notAcquired())
			}
			hold.Queued(r.Position, "")
			wait = r.Fallback
			if w == nil {
				w = q.QueueSubscribe(l.key, token)
			}
		}
		if mw := p.Retry.MaxWait; mw > 0 {
			left := mw - time.Since(start)
			if left <= 0 {
				if err == nil {
					err = ErrNotAcquired
				}
				return fail(attemptOutcome(err, telnames.OutcomeTimeout), l.finalError(err, attempts, start, true))
			}
			wait = min(wait, left)
		}
		// The wait's own error, never the last attempt's: a backend error
		// is retried after the wait, not read as the ctx ending.
		var (
			cause string
			werr  error
		)
		if w != nil {
			if wctx == nil {
				var stop func()
				wctx, stop = c.waitCtx(ctx)
				defer stop()
			}
			cause, werr = w.Wait(wctx, wait)
		} else if !c.pause(ctx, wait) {
			werr = ErrClosed
		}
		if werr != nil || ctx.Err() != nil {
			if ctx.Err() == nil { // the client closed: leave the queue
				return fail(telnames.OutcomeClosed, ErrClosed)
			}
			return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
		}
		if w != nil {
			hold.Queued(0, cause)
			// A handover's push carries the grant: taken as this token's
			// only for the place its last answer found it queued at. A
			// push from an earlier place (a handover that expired before
			// the token heard of it, delivered after it rejoined) is only
			// a wake-up: the next attempt finds out.
			if g, ok := w.Granted(); ok && joined != 0 && g.Joined == joined {
				lease, fctx, err, rejoin := take(g, queuedSent)
				if !rejoin {
					return lease, fctx, err
				}
				joined = 0 // that place is gone: the next answer says where the token is
			}
		}
	}
}

// isTooLate reports a tooLate in err's chain (a FIFO grant given back). It
// uses errors.AsType, not errors.As: the target errors.As takes escapes, one
// allocation on every grant.
func isTooLate(err error) bool {
	_, ok := errors.AsType[tooLate](err)
	return ok
}

// previousOf is what a FIFO release leaves for the next holder: the hold
// span's trace and span ids, "<trace id>-<span id>", when it is sampled.
func (l *Lease) previousOf() string {
	sc := trace.SpanContextFromContext(l.logCtx)
	if !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String() + "-" + sc.SpanID().String()
}
