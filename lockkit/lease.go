package lockkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockkit/lockkit/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// Lease is a held lock: its token, fencing number and local deadline. It is
// renewed in the background until Release, and lost when a renewal is
// refused or its deadline passes without one.
type Lease struct {
	lock  Lock
	token string
	fence int64

	ctx    context.Context // done once lost or released; cause says which
	cancel context.CancelCauseFunc

	hold   *telemetry.Hold // nil when telemetry is off
	logCtx context.Context // carries only the hold span, for log lines

	mu       sync.Mutex
	deadline time.Time   // monotonic; start of the winning attempt + TTL - drift
	expiry   *schedEntry // runs onDeadline at deadline
	renew    *schedEntry // runs the next extend when due; nil when renewal is off
	state    leaseState
	lostErr  error
}

type leaseState uint8

const (
	held leaseState = iota
	lost
	released
)

// errReleased is the lease ctx's cause after a release.
var errReleased = errors.New("lockkit: lease released")

func newLease(l Lock, token string, fence int64, deadline time.Time, hctx context.Context, hold *telemetry.Hold) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	logCtx := context.Background()
	if hold != nil {
		// Keep the span, not the caller's ctx: the lease outlives it.
		logCtx = trace.ContextWithSpanContext(logCtx, trace.SpanContextFromContext(hctx))
	}
	return &Lease{lock: l, token: token, fence: fence, ctx: ctx, cancel: cancel, deadline: deadline, hold: hold, logCtx: logCtx}
}

// start arms the deadline and, unless renewal is off, the renewal, on the
// client's scheduler: a lease costs neither a goroutine nor a runtime timer
// until something is due (see scheduler).
func (l *Lease) start() {
	c := l.lock.d.c
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = c.sched.add(l.deadline, func() { go l.onDeadline() })
	if every := l.lock.d.policy.RenewInterval; every > 0 {
		l.renew = c.sched.add(time.Now().Add(every), func() { c.background(l.renewNow) })
	}
}

// Key is the Redis key of the lock.
func (l *Lease) Key() string { return l.lock.key }

// Token is this lease's owner id in Redis: 128 random bits, text-encoded.
func (l *Lease) Token() string { return l.token }

// Fence is the fencing number issued with the lease, strictly increasing per
// key; 0 when the domain has no fencing. Pass it to the protected resource.
func (l *Lease) Fence() int64 { return l.fence }

// Deadline is when the lease stops being valid unless renewed, on this
// process's monotonic clock.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed once the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is held or after a clean release, and an error
// matching ErrLockLost once the lease was lost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// Extend resets the lease's TTL now. It returns ErrNotHeld, and the lease is
// lost, when the key no longer holds this lease's token; ErrUnavailable when
// Redis cannot answer (the lease stays held until its deadline).
func (l *Lease) Extend(ctx context.Context) error {
	l.mu.Lock()
	st := l.state
	l.mu.Unlock()
	if st != held {
		return fmt.Errorf("lockkit: extend %s: %w", l.lock.key, ErrNotHeld)
	}
	return l.extend(ctx)
}

func (l *Lease) extend(parent context.Context) error {
	d := l.lock.d
	ctx, span := l.hold.StartRenew(parent)
	ctx, cancel := context.WithTimeout(ctx, d.c.cmdTimeout)
	defer cancel()
	sent := time.Now()
	ok, err := d.c.be.extend(ctx, l.lock.key, l.token, d.policy.TTL)
	switch {
	case err != nil && errors.Is(err, context.Canceled) && parent.Err() != nil:
		// Cut short by its caller (Release or Close cancel the lease's ctx
		// under an in-flight renewal): not a backend failure.
		err = fmt.Errorf("lockkit: extend %s: %w", l.lock.key, err)
		span.End(telemetry.OutcomeCanceled, err)
		return err
	case err != nil:
		err = fmt.Errorf("lockkit: extend %s: %w: %w", l.lock.key, ErrUnavailable, err)
		span.End(telemetry.OutcomeUnavailable, err)
		return err
	case !ok:
		err = fmt.Errorf("lockkit: extend %s: %w", l.lock.key, ErrNotHeld)
		span.End(telemetry.OutcomeRefused, err)
		l.markLost(telemetry.LostRefused, fmt.Errorf("%w: %s: extend refused, the key no longer holds this lease", ErrLockLost, l.lock.key))
		return err
	}
	span.End(telemetry.OutcomeOK, nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == held {
		if next := sent.Add(d.policy.TTL - d.drift); next.After(l.deadline) {
			l.deadline = next
			d.c.sched.reset(l.expiry, next)
		}
	}
	return nil
}

// renewNow extends the lease and schedules the next renewal: after
// RenewInterval, or sooner after a failed extend. A failed extend does not
// lose the lease; only the deadline does.
func (l *Lease) renewNow() {
	p := &l.lock.d.policy
	// The extend may not outlive the lease: past the deadline there is
	// nothing left to extend. Release cancels l.ctx and so the extend.
	ctx, cancel := context.WithDeadline(l.ctx, l.Deadline())
	err := l.extend(ctx)
	cancel()
	next := p.RenewInterval
	switch {
	case errors.Is(err, ErrNotHeld):
		return // lost; extend said so
	case err != nil:
		next = max(p.RenewInterval/4, 5*time.Millisecond)
	}
	l.mu.Lock()
	if l.state == held {
		l.lock.d.c.sched.reset(l.renew, time.Now().Add(next))
	}
	l.mu.Unlock()
}

// onDeadline runs when the scheduler reaches the lease's deadline.
func (l *Lease) onDeadline() {
	l.mu.Lock()
	if l.state != held || time.Now().Before(l.deadline) {
		l.mu.Unlock()
		return // released, already lost, or extended while it was being run
	}
	l.mu.Unlock()
	l.markLost(telemetry.LostDeadline, fmt.Errorf("%w: %s: deadline passed without a successful extend", ErrLockLost, l.lock.key))
}

func (l *Lease) markLost(why telemetry.LostCause, cause error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	l.state = lost
	l.lostErr = cause
	l.stopTimers()
	l.mu.Unlock()
	l.cancel(cause)
	l.hold.Lost(why, cause)
	l.lock.d.c.log.WarnContext(l.logCtx, "lockkit: lease lost", "domain", l.lock.d.name, "key", l.lock.d.c.logKey(l.lock.key), "cause", cause)
}

// stopTimers unqueues the deadline and the renewal; l.mu is held.
func (l *Lease) stopTimers() {
	s := &l.lock.d.c.sched
	s.stop(l.expiry)
	s.stop(l.renew)
}

// Release gives the lock back: an owner-checked delete that removes the key
// only if it still holds this lease's token. It returns ErrNotHeld when it
// does not (the lease expired, and maybe someone else holds the lock now);
// nothing is deleted then. Release stops the renewal either way.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.state == released {
		l.mu.Unlock()
		return fmt.Errorf("lockkit: release %s: already released: %w", l.lock.key, ErrNotHeld)
	}
	l.state = released
	lostErr := l.lostErr
	l.stopTimers()
	l.mu.Unlock()
	l.cancel(errReleased)
	defer l.lock.d.c.untrack(l)

	c := l.lock.d.c
	ctx, span := l.hold.StartRelease(ctx)
	ctx = commandCtx(context.WithoutCancel(ctx), c.cmdTimeout)
	ok, err := c.be.release(ctx, l.lock.key, l.token)
	outcome := telemetry.OutcomeReleased
	switch {
	case err != nil:
		err = fmt.Errorf("lockkit: release %s: %w: %w (the key expires by its TTL)", l.lock.key, ErrUnavailable, err)
		outcome = telemetry.OutcomeUnavailable
	case !ok:
		err = fmt.Errorf("lockkit: release %s: %w", l.lock.key, ErrNotHeld)
		outcome = telemetry.OutcomeExpired
	}
	span.End(outcome, err)
	if lostErr != nil {
		l.hold.End(telemetry.OutcomeLost, lostErr)
	} else {
		l.hold.End(outcome, err)
	}
	return err
}

// releaseUntracked gives back a lease that never started (client closed
// while it was being acquired).
func (l *Lease) releaseUntracked() {
	l.state = released
	l.cancel(errReleased)
	l.lock.releaseToken(context.Background(), l.token)
}

// run is the body of Do and TryDo: fn under the lease, then release.
func (l *Lease) run(ctx context.Context, fn func(context.Context, *Lease) error) (err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.ctx, func() { cancel(context.Cause(l.ctx)) })
	defer func() {
		stop()
		cancel(nil)
		lostErr := l.Err()
		if rerr := l.Release(ctx); rerr != nil && lostErr == nil {
			l.lock.d.c.log.WarnContext(l.logCtx, "lockkit: release failed", "domain", l.lock.d.name, "key", l.lock.d.c.logKey(l.lock.key), "error", rerr)
		}
		if lostErr != nil {
			err = errors.Join(lostErr, err)
		}
	}()
	return fn(fctx, l)
}
