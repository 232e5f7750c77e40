package lockkit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/lockkit/lockkit/internal/errcheck"
	"github.com/lockkit/lockkit/internal/lockhook"
	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/telnames"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/circuit"
	"github.com/lockkit/lockkit/internal/holder"
	"go.opentelemetry.io/otel/trace"
)

// Lock is one key of one domain: a small value, cheap to build and copy.
// Generated helpers return it (embedded in a typed wrapper); the zero Lock
// returns ErrNoClient from every method.
type Lock struct {
	d   *Domain
	key string
	err error // a key the builder refused (policy.CheckTag)
}

// Key is the lock's key (prefix included).
func (l Lock) Key() string { return l.key }

// commandTimeout is the command timeout of l's Client (WithCommandTimeout;
// 500ms by default, and for a Lock of no Client): what bounds each command
// sent for l. DoOn bounds each acquire on its backend by it; such a backend
// bounds the statements it sends of its own by it too (postgres.DoTx: its
// BEGIN and its rollback, through internal/lockhook).
func (l Lock) commandTimeout() time.Duration {
	if l.d == nil || l.d.c == nil || l.d.c.cmdTimeout <= 0 {
		return policy.DefaultCommandTimeout
	}
	return l.d.c.cmdTimeout
}

func init() {
	lockhook.CommandTimeout = func(l any) time.Duration {
		lock, _ := l.(Lock)
		return lock.commandTimeout()
	}
}

// Do acquires the lock, retrying per the domain's policy, runs fn, and
// releases the lock, also when fn panics.
//
// fn's ctx is cancelled, with context.Cause an error that matches
// ErrLockLost, the moment the lease is lost. Do returns an error that
// matches ErrLockLost, joined with fn's own error if any, whenever the lease
// stopped being valid before the release: lost while fn ran, past its local
// deadline when fn returned (Do checks the clock itself, so a process paused
// past the deadline never reports success), or found by the release to be
// held by another owner. A release that fails for another reason (the
// backend did not answer) is logged and does not mask fn's result: the lease
// was valid when fn returned, and the key expires by its TTL.
//
// When the client is closed while fn runs, fn's ctx is cancelled with a
// cause matching ErrClosed, and Close waits (within its own ctx) for fn to
// return before the lock is released: the lock is never released under a
// running fn.
func (l Lock) Do(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil && l.d != nil {
		return fmt.Errorf("lockkit: Do %s: %w", l.key, errNilFn)
	}
	lease, fctx, err := l.acquire(ctx, true, true)
	if err != nil {
		return err
	}
	return lease.run(fctx, fn)
}

// TryDo is Do with a single attempt: a held lock returns ErrNotAcquired at
// once, and fn does not run.
func (l Lock) TryDo(ctx context.Context, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil && l.d != nil {
		return fmt.Errorf("lockkit: TryDo %s: %w", l.key, errNilFn)
	}
	lease, fctx, err := l.acquire(ctx, false, true)
	if err != nil {
		return err
	}
	return lease.run(fctx, fn)
}

// Acquire takes the lock, retrying per the domain's policy, and returns the
// lease, renewed in the background until Release. The lease outlives ctx:
// ctx bounds only the acquisition.
func (l Lock) Acquire(ctx context.Context) (*Lease, error) {
	lease, _, err := l.acquire(ctx, true, false)
	return lease, err
}

// TryAcquire is Acquire with a single attempt: a held lock returns
// ErrNotAcquired at once.
func (l Lock) TryAcquire(ctx context.Context) (*Lease, error) {
	lease, _, err := l.acquire(ctx, false, false)
	return lease, err
}

// acquire runs one acquisition: one attempt, or attempts with backoff per
// the domain's retry policy when retry is set. It returns the lease and, for
// Do (forDo), the ctx for fn: it carries the hold span and is cancelled when
// the lease is lost or the client closes.
func (l Lock) acquire(ctx context.Context, retry, forDo bool) (*Lease, context.Context, error) {
	if err := l.usable(ctx); err != nil {
		return nil, ctx, err
	}
	lease, fctx, err := l.acquireOn(ctx, l.d.c.be, retry, forDo)
	return lease, fctx, errcheck.Returned(err)
}

// usable reports why l cannot be acquired under ctx, or nil: no client, a
// nil ctx, the domain's or the key's error, a closed client.
func (l Lock) usable(ctx context.Context) error {
	switch {
	case l.d == nil:
		return ErrNoClient
	case ctx == nil:
		return fmt.Errorf("lockkit: acquire %s: %w", l.key, errNilCtx)
	case l.d.err != nil:
		return l.d.err
	case l.d.c == nil || l.d.c.be == nil:
		return ErrNoClient // a domain of a zero Client
	case l.err != nil:
		return l.err
	case l.d.c.isClosed():
		return ErrClosed
	}
	return nil
}

// acquireOn is acquire on be: the client's backend, or one that holds a
// single lock for the length of a transaction (postgres.DoTx).
func (l Lock) acquireOn(ctx context.Context, be driver.Backend, retry, forDo bool) (*Lease, context.Context, error) {
	d := l.d
	if d == nil {
		return nil, ctx, ErrNoClient
	}
	if d.err != nil {
		return nil, ctx, d.err
	}
	if l.err != nil {
		return nil, ctx, l.err
	}
	c := d.c
	if c.isClosed() {
		return nil, ctx, ErrClosed
	}
	hctx, hold := d.tel.StartHold(ctx, l.key)
	actx := hold.StartAcquire(hctx)
	return l.acquireHeld(ctx, hctx, actx, hold, be, retry, forDo)
}

// acquireHeld is acquireOn's acquisition under a hold already started: the
// hold's ctx (hctx), its acquire span's (actx). DoAll starts one hold per
// lock for the whole set, deferred (obs.Hold.Defer), and makes its passes
// through here.
func (l Lock) acquireHeld(ctx, hctx, actx context.Context, hold *obs.Hold, be driver.Backend, retry, forDo bool) (*Lease, context.Context, error) {
	d := l.d
	c := d.c
	p := &d.policy
	// Counted until it returns (a lease tracked, or what it may hold given
	// back): Close waits for it.
	if !c.beginAcquire(l.key) {
		hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeClosed, Err: ErrClosed})
		hold.End(telnames.OutcomeClosed, ErrClosed)
		return nil, ctx, ErrClosed
	}
	defer c.endAcquire(l.key)
	if p.fifo() {
		// The client's backend keeps queues (Domain refuses FIFO domains
		// otherwise); another backend (a transaction's) polls.
		if q := c.queueOf(be); q != nil {
			return l.acquireFIFO(ctx, hctx, actx, hold, be, q, retry, forDo)
		}
		if w := c.waiterOf(be); w != nil && retry && p.Retry.retries() {
			return l.acquireServerQueue(ctx, hctx, actx, hold, be, w, forDo)
		}
	}
	return l.poll(ctx, hold, retry, &p.Retry, time.Now(), func(attempts int, contended bool) (*Lease, context.Context, error) {
		return l.try(ctx, hctx, actx, hold, be, attempts, contended, forDo)
	})
}

// try is one attempt at l: the lease when it is granted (or ErrClosed),
// otherwise the attempt's error (ErrNotAcquired when the key is held).
func (l Lock) try(ctx, hctx, actx context.Context, hold *obs.Hold, be driver.Backend, attempts int, contended, forDo bool) (*Lease, context.Context, error) {
	token := rand.Text()
	sent := time.Now()
	pl := new(pendingLease)
	fence, err := l.attempt(actx, be, token, l.d.c.holderOf(hctx), &pl.req)
	if err != nil {
		return nil, ctx, err
	}
	if from := pl.req.TTLFrom; !from.IsZero() && from.Before(sent) {
		// The store counts the TTL from an earlier renewal (TTLFrom).
		sent = from
	}
	return l.grant(ctx, hctx, hold, be, granted{token: token, fence: fence, sent: sent, attempts: attempts, contended: contended, into: &pl.lease}, forDo)
}

// poll is an acquisition that polls: try, and while it answers anything
// but a lease or ErrClosed, wait per the domain's retry policy (when retry
// is set) and try again, per r from start. l names the key in errors; the
// hold's acquire span ends here when no lease comes.
func (l Lock) poll(ctx context.Context, hold *obs.Hold, retry bool, r *Retry, start time.Time, try func(attempts int, contended bool) (*Lease, context.Context, error)) (*Lease, context.Context, error) {
	c := l.d.c
	sched := retrySchedule{r: r, start: start}
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
		attempts++
		lease, fctx, err := try(attempts, contended)
		if err == nil || err == ErrClosed {
			return lease, fctx, err
		}
		if attempts == 1 && err == ErrNotAcquired {
			contended = true
		}
		if err != ErrNotAcquired { //nolint:errorlint // the bare value: contention
			settleCtx(ctx) // a failure at ctx's deadline is ctx's ending
		}
		if ctx.Err() != nil {
			return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
		}
		if !retry || !r.retries() || errors.Is(err, breaker.ErrOpen) || errors.Is(err, driver.ErrFinal) {
			// An open breaker fails fast: waiting out a backoff would only
			// pile callers up behind a backend that is known to be sick.
			return fail(attemptOutcome(err, telnames.OutcomeContended), l.finalError(err, attempts, start, false))
		}
		wait, ended, ok := sched.next()
		if !ok {
			return fail(attemptOutcome(err, ended), l.finalError(err, attempts, start, true))
		}
		hold.Retry(attempts, wait, attemptOutcome(err, telnames.OutcomeContended))
		if !c.pause(ctx, wait) {
			if ctx.Err() == nil { // the client closed
				return fail(telnames.OutcomeClosed, ErrClosed)
			}
			return fail(ctxOutcome(ctx), l.ctxError(ctx, attempts, start))
		}
	}
}

// granted is a successful attempt at a lock: what the backend gave
// (token, fence), when the attempt was sent, and how the acquisition went.
type granted struct {
	token     string
	fence     int64
	sent      time.Time // the lease's start: the attempt's send, or a FIFO grant's base
	attempts  int
	contended bool

	// validUntil, when set, is the lease's deadline as the caller computed
	// it (a FIFO handover counts from an earlier send than the grant's);
	// otherwise it is sent + TTL − drift.
	validUntil time.Time
	// queue is the backend's queue of a FIFO lease, whose release hands
	// the lock over; nil otherwise.
	queue driver.Queue
	// firstRenew, when > 0, brings the first renewal forward (a
	// handed-over lock's shorter TTL on the server).
	firstRenew time.Duration
	// into, when set, is where the lease is made (see pendingLease).
	into *Lease
}

// pendingLease is one attempt's request and, if it is granted, its lease:
// one allocation for both.
type pendingLease struct {
	req   driver.Request
	lease Lease
}

// grant turns a granted attempt into a tracked lease, for Do (forDo) or
// Acquire, and ends the acquire span. It is the common end of acquireOn and
// of DoAll's batched path. It returns ErrClosed, with the hold ended and the
// key given back, when the client closed; an error wrapping ErrUnavailable,
// with the key given back and the hold still open (the caller may retry),
// when the reply came too late to trust.
func (l Lock) grant(ctx, hctx context.Context, hold *obs.Hold, be driver.Backend, g granted, forDo bool) (*Lease, context.Context, error) {
	d := l.d
	c := d.c
	p := &d.policy
	validUntil := g.validUntil
	if validUntil.IsZero() {
		validUntil = g.sent.Add(p.TTL - d.drift)
	}
	if time.Until(validUntil) <= 0 {
		// The reply came too late to trust: the key may already have
		// expired. Give it back and count it as a backend failure.
		back := l.dropToken(ctx, be, g.token)
		if !g.validUntil.IsZero() {
			err := fmt.Errorf("%w: the grant came too late to trust (TTL %v less drift)", ErrUnavailable, p.TTL)
			if back {
				err = tooLate{err}
			}
			return nil, ctx, err
		}
		return nil, ctx, fmt.Errorf("%w: acquire took %v, longer than the TTL %v less drift", ErrUnavailable, time.Since(g.sent).Round(time.Millisecond), p.TTL)
	}
	lease := g.into
	if lease == nil {
		lease = new(Lease)
	}
	initLease(lease, l, be, g.token, g.fence, g.sent, validUntil, hctx, hold)
	lease.queue, lease.firstRenew = g.queue, g.firstRenew
	fctx := hctx
	if forDo {
		fctx, lease.fnCancel = context.WithCancelCause(hctx)
		lease.runDone = make(chan struct{})
	}
	// track arms the lease's timers in the same step, so a Close either
	// sees a running lease or makes track refuse it.
	if !c.track(lease) {
		lease.releaseUntracked()
		hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeClosed, Attempts: g.attempts, Contended: g.contended, Err: ErrClosed})
		hold.End(telnames.OutcomeClosed, ErrClosed)
		return nil, ctx, ErrClosed
	}
	hold.EndAcquire(obs.AcquireResult{Outcome: telnames.OutcomeAcquired, Attempts: g.attempts, Contended: g.contended, Fence: g.fence})
	if testHookTracked != nil {
		testHookTracked(c)
	}
	if c.isClosed() {
		// Close came between track and here: hand out no lease that Close
		// is about to release, or already has.
		rerr := lease.Release(ctx)
		if forDo {
			lease.fnCancel(nil)
			lease.doneRun(rerr) // Close, waiting on it, counts a failed release
		}
		return nil, ctx, ErrClosed
	}
	return lease, fctx, nil
}

// tooLate is grant's error for a FIFO grant that came too late to trust
// and was given back at once: its token holds nothing, and the waiter may
// join again with it.
type tooLate struct{ error }

func (e tooLate) Unwrap() error { return e.error }

// testHookTracked, when set by a test, runs right after a new lease is
// tracked: where a Close could come between tracking and handing out.
var testHookTracked func(*Client)

// attemptOutcome is the telemetry outcome of a failed attempt: held is what
// contention means at this point (contended, exhausted or timeout).
func attemptOutcome(err error, held telnames.Outcome) telnames.Outcome {
	switch {
	case isContention(err):
		return held
	case errors.Is(err, breaker.ErrOpen):
		return telnames.OutcomeBreakerOpen
	case errors.Is(err, ErrUnavailable):
		return telnames.OutcomeUnavailable
	}
	return telnames.OutcomeError
}

func ctxOutcome(ctx context.Context) telnames.Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return telnames.OutcomeTimeout
	}
	return telnames.OutcomeCanceled
}

// attempt sends one acquisition, described in req (the caller's memory,
// which it fills), with the holder description who (Client.holderOf). It returns nil, the bare ErrNotAcquired (compared with ==:
// a retried attempt allocates nothing; finalError names the lock), or an error wrapping
// ErrUnavailable.
func (l Lock) attempt(ctx context.Context, be driver.Backend, token, who string, req *driver.Request) (int64, error) {
	d := l.d
	p := &d.policy
	*req = driver.Request{
		Key: l.key, Token: token, Holder: who, TTL: p.TTL, Fencing: p.Fencing,
		Replicas: p.Replicas, ReplicaTimeout: p.ReplicaTimeout,
	}
	var (
		fence int64
		err   error
	)
	if c := d.c; be != c.be {
		// A backend of DoOn's caller is not guarded, and the guard is what
		// bounds the Client's own acquires: bound this one here (guarantee
		// 7), by a timer as the guard does (deadline.go).
		cctx, scope := c.withCommandTimeout(ctx, c.cmdTimeout+req.ReplicaTimeout)
		fence, err = be.Acquire(cctx, req)
		scope.end()
	} else {
		fence, err = be.Acquire(ctx, req)
	}
	switch {
	case err == nil:
		return fence, nil
	case errors.Is(err, driver.ErrContended):
		return 0, ErrNotAcquired
	case errors.Is(err, breaker.ErrOpen):
		// Refused before anything was sent: there is nothing to clean up.
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, circuit.ErrData):
		// The store answered that it cannot read what it holds under the
		// key (a fence counter that is no integer): nothing was taken.
		return 0, err
	default:
		// The script may have run even though the reply was lost: give
		// back the token we may now hold, or it blocks others until its
		// TTL. In the background, so a hung server does not double the wait.
		l.giveBackLater(ctx, be, token)
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// unavailable is a backend's error as the caller sees it: wrapped in
// ErrUnavailable, unless it is about the data under a key
// (circuit.ErrData: a fence counter that is no integer), which is no outage
// and is reported as itself (it names the key, and matches driver.ErrFinal).
func unavailable(err error) error {
	if errors.Is(err, circuit.ErrData) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// holderOf describes who takes a lock under hctx, the hold's ctx: the
// client's fixed description, and the hold span's trace and span ids when it
// is traced (made only then; an election's next term links to that span).
func (c *Client) holderOf(hctx context.Context) string {
	sc := trace.SpanContextFromContext(hctx)
	if !sc.IsSampled() {
		return c.whoDesc
	}
	who := c.who
	who.TraceID, who.SpanID = sc.TraceID().String(), sc.SpanID().String()
	return string(holder.AppendDescription(nil, who))
}

// releaseToken is a best-effort owner-checked delete, for an acquisition
// that will not become a lease. held is whether the token held the key; err
// is set when no answer came.
func (l Lock) releaseToken(ctx context.Context, be driver.Backend, token string) (held bool, err error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.d.c.cmdTimeout)
	defer cancel()
	if q := l.d.c.queueOf(be); q != nil && l.d.policy.fifo() {
		// Leave the queue too, and hand the lock on if it was ours.
		return q.QueueRelease(rctx, l.key, token, "")
	}
	return be.Release(rctx, l.key, token)
}

// dropToken gives back token, granted l by an acquisition that will not
// make it a lease (the client closed, or the grant came too late to trust).
// When the release goes unanswered, giveBack goes on in the background
// (back is false): the token must not be used again. The caller is a
// counted acquisition (Client.beginAcquire).
func (l Lock) dropToken(ctx context.Context, be driver.Backend, token string) (back bool) {
	if _, err := l.releaseToken(ctx, be, token); err != nil {
		l.giveBackLater(ctx, be, token)
		return false
	}
	return true
}

// giveBackLater runs giveBack on its own goroutine, counted as an
// acquisition of l's key, so Close waits for it (or names the key). The
// caller is a counted acquisition (Client.beginAcquire): the count never
// drops to 0 in between, so a Close under way is still waiting.
func (l Lock) giveBackLater(ctx context.Context, be driver.Backend, token string) {
	c := l.d.c
	c.joinAcquire(l.key)
	go func() {
		defer c.endAcquire(l.key)
		l.giveBack(ctx, be, token)
	}()
}

// giveBack releases the token of an acquire whose outcome is unknown (its
// reply was lost or came after the command timeout). One release is not
// enough: a server that stalled (SIGSTOP, a long fork) answers neither the
// acquire nor the release, and runs the acquire when it wakes, after the
// release timed out. So the release is repeated, with backoff, until it
// removes the key, or twice answers that the token holds nothing (the
// second at least a command timeout after the first, so that an acquire
// still on its way is caught), or the TTL has passed (the key is gone by
// then anyway). A Close waits for it, and stops it only when Close itself
// returns (its ctx ended first: it names the key).
func (l Lock) giveBack(ctx context.Context, be driver.Backend, token string) {
	c := l.d.c
	until := time.Now().Add(l.d.policy.TTL)
	wait, misses := c.cmdTimeout/2, 0
	for {
		held, err := l.releaseToken(ctx, be, token)
		if err == nil {
			if held {
				return
			}
			if misses++; misses == 2 {
				return
			}
			wait = max(wait, c.cmdTimeout)
		}
		if time.Now().Add(wait).After(until) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.closeDone:
			t.Stop()
			return
		}
		wait = min(2*wait, time.Second)
	}
}

// finalError describes an acquisition that ended without a lease. A lone
// contended attempt returns ErrNotAcquired naming the lock (notAcquired).
func (l Lock) finalError(last error, attempts int, start time.Time, exhausted bool) error {
	if !exhausted && last == ErrNotAcquired {
		return l.notAcquired()
	}
	return fmt.Errorf("lockkit: acquire %s: gave up after %d attempt(s) in %v: %w",
		l.key, attempts, time.Since(start).Round(time.Millisecond), last)
}

// isContention reports whether err is a single attempt's contention: the
// bare ErrNotAcquired of attempt, or notAcquired's.
func isContention(err error) bool {
	if err == ErrNotAcquired {
		return true
	}
	_, ok := err.(*notAcquiredError)
	return ok
}

// notAcquired is ErrNotAcquired for a single attempt at l: it names the key
// and the domain, and matches ErrNotAcquired with errors.Is.
func (l Lock) notAcquired() error { return &notAcquiredError{domain: l.d.name, key: l.key} }

// ctxError reports that the caller's ctx ended the acquisition; it matches
// ctx.Err() (context.Canceled or DeadlineExceeded), never ErrNotAcquired.
func (l Lock) ctxError(ctx context.Context, attempts int, start time.Time) error {
	return l.stoppedError(ctx, "acquire", attempts, "attempt(s)", start)
}

// stoppedError is ctxError for op (acquire, Lead), counting n of what
// (attempts, campaign rounds) since start.
func (l Lock) stoppedError(ctx context.Context, op string, n int, what string, start time.Time) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return fmt.Errorf("lockkit: %s %s: stopped waiting after %d %s in %v: %w",
		op, l.key, n, what, time.Since(start).Round(time.Millisecond), err)
}
