package lockkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockkit/lockkit/internal/errcheck"
	"github.com/lockkit/lockkit/internal/obs"
	"github.com/lockkit/lockkit/internal/telnames"

	"github.com/lockkit/lockkit/driver"
	"go.opentelemetry.io/otel/trace"
)

// Lease is a held lock: its token, fencing number and local deadline. It is
// renewed in the background until Release, and lost when a renewal is
// refused or its deadline passes without one.
type Lease struct {
	lock  Lock
	be    driver.Backend // where it is held: the client's backend, or a transaction
	queue driver.Queue   // a FIFO domain's queue: its release hands the lock over; nil otherwise
	// firstRenew, when > 0 and sooner than Renew, is when the first
	// renewal is due: a handed-over lock has less than the TTL left.
	firstRenew time.Duration
	token      string
	fence      int64

	hold   *obs.Hold       // nil when telemetry is off
	logCtx context.Context // carries only the hold span, for log lines

	// fnCancel cancels the ctx of the fn that Do runs under this lease; nil
	// for a lease from Acquire. Close uses it to ask fn to finish.
	fnCancel context.CancelCauseFunc
	runDone  chan struct{} // closed when Do has released the lease; nil for Acquire
	// runErr is Do's release error when the release failed and the lock
	// may still be held (not ErrNotHeld), written before runDone closes:
	// Close counts it as a lease it could not see released.
	runErr error

	mu       sync.Mutex
	deadline time.Time // monotonic; start of the winning attempt + TTL - drift
	// holdEnd, when the domain has a max hold, is the deadline the lease
	// can never pass: start of the winning attempt + MaxHold − drift.
	holdEnd time.Time
	capped  bool       // an extend reached holdEnd: renewal has nothing left to do
	expiry  schedEntry // runs onDeadline at deadline
	renew   schedEntry // runs the next extend when due; never queued when renewal is off
	// renewDue is when the queued renewal is due: renewNow measures from it
	// how late its answer came (the domain's renewLag).
	renewDue time.Time
	// ctx is done once the lease is lost or released, with the cause
	// (ended) saying which. It is made on first use (Done, Do, a renewal):
	// a lease that is taken and given back without one costs no ctx.
	ctx       context.Context
	cancel    context.CancelCauseFunc
	ended     error // the cause, once lost or released
	state     leaseState
	lostErr   error
	noRenew   bool // Close gave up on this lease: let it expire by its TTL
	holdEnded bool // the hold span has ended (released or lost)
}

type leaseState uint8

const (
	held leaseState = iota
	lost
	released
)

// errReleased is the lease ctx's cause after a release by its holder.
var errReleased = errors.New("lockkit: lease released")

// initLease makes *lease a new lease (lease is fresh memory, not shared).
// start is the lease's start, from which its TTL counts, and so its max hold;
// deadline is no later than start + TTL − drift (a FIFO handover's is
// earlier: the lock's first TTL on the server is shorter).
func initLease(lease *Lease, l Lock, be driver.Backend, token string, fence int64, start, deadline time.Time, hctx context.Context, hold *obs.Hold) {
	logCtx := context.Background()
	if hold != nil {
		// Keep the span, not the caller's ctx: the lease outlives it.
		logCtx = trace.ContextWithSpanContext(logCtx, trace.SpanContextFromContext(hctx))
	}
	*lease = Lease{lock: l, be: be, token: token, fence: fence, deadline: deadline, hold: hold, logCtx: logCtx}
	lease.holdEnd = l.d.holdEnd(start)
}

// holdEnd is when a lease that started at start reaches its max hold on
// this clock; zero without a max_hold. The cap counts from the start, as
// the TTL does, less the same drift; not from a deadline, which a handover
// brings forward (that cost a handed-over lease TTL − its first TTL of its
// max hold).
func (d *Domain) holdEnd(start time.Time) time.Time {
	if d.policy.MaxHold <= 0 {
		return time.Time{}
	}
	return start.Add(d.policy.MaxHold - d.drift)
}

// extendTTL is the TTL an extend sent at sent asks for: the domain's, or,
// near the max hold (holdEnd, zero for none), only what reaches the cap:
// holdEnd + drift on the server's clock, counted from the send (capped).
// none: too little is left for the store to keep; the last extend already
// reached the cap.
func (d *Domain) extendTTL(holdEnd, sent time.Time) (ttl time.Duration, capped, none bool) {
	ttl = d.policy.TTL
	if holdEnd.IsZero() {
		return ttl, false, false
	}
	left := holdEnd.Add(d.drift).Sub(sent)
	if left >= ttl {
		return ttl, false, false
	}
	g := max(d.c.caps.TTLGranularity, time.Millisecond)
	ttl = left.Truncate(g)
	return ttl, true, ttl < max(d.c.caps.MinTTL, g)
}

// lostAtDeadline is why a lease whose deadline passed is lost: its max
// hold, when the deadline was the cap (an extend reached it, or the clock
// did), or else no successful extend.
func (l *Lease) lostAtDeadline() (telnames.LostCause, error) {
	l.mu.Lock()
	atCap := l.capped || !l.holdEnd.IsZero() && !time.Now().Before(l.holdEnd)
	l.mu.Unlock()
	if atCap {
		return telnames.LostMaxHold, fmt.Errorf("%w: %s: held for its max hold %v (max_hold), which renewal never passes", ErrLockLost, l.lock.key, l.lock.d.policy.MaxHold)
	}
	return telnames.LostDeadline, l.deadlineErr()
}

// leaseCtx is the lease's own ctx (it outlives the acquire's), made on first
// use: done once the lease is lost or released.
func (l *Lease) leaseCtx() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		if l.ended != nil {
			l.cancel(l.ended)
		}
	}
	return l.ctx
}

// end marks the lease's ctx done with cause why (lost or released); the
// first cause stays.
func (l *Lease) end(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended != nil {
		return
	}
	l.ended = why
	if l.cancel != nil {
		l.cancel(why)
	}
}

// runLeaseDeadline and runLeaseRenewal are a lease's scheduler entries.
func runLeaseDeadline(arg any) { go arg.(*Lease).onDeadline() }

func runLeaseRenewal(arg any) {
	l := arg.(*Lease)
	l.lock.d.c.background(l.renewNow)
}

// start arms the deadline and, unless renewal is off, the renewal, on the
// client's scheduler: a lease costs neither a goroutine nor a runtime timer
// until something is due (see scheduler).
func (l *Lease) start() {
	c := l.lock.d.c
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return
	}
	l.expiry = schedEntry{run: runLeaseDeadline, arg: l}
	c.sched.add(&l.expiry, l.deadline)
	if every := l.lock.d.policy.Renew; every > 0 {
		if l.firstRenew > 0 {
			every = min(every, l.firstRenew)
		}
		l.renew = schedEntry{run: runLeaseRenewal, arg: l}
		l.renewDue = l.lock.d.renewDue(time.Now(), l.deadline, every)
		c.sched.add(&l.renew, l.renewDue)
	}
}

// renewDue is when the renewal after now is due, for a lease whose local
// deadline is deadline: after every (the renew interval), or sooner, so
// that a renewal firing as late as this domain's renewals lately answered
// (renewLag) and answered within the extend's timeout still lands before
// the deadline: due ≤ deadline − extend timeout − renewLag. On a slow
// link or a CPU-throttled process, renewing only every TTL/3 after the
// previous answer lets the answers drift past the deadline (issue #35).
// It is never sooner than a quarter of the renew interval (or every, if
// shorter): the pace of a retry after a failed extend, so a lag that
// leaves no room renews back to back, never in a storm.
func (d *Domain) renewDue(now, deadline time.Time, every time.Duration) time.Time {
	due := now.Add(every)
	latest := deadline.Add(-d.extendTimeout() - time.Duration(d.renewLag.Load()))
	if !latest.Before(due) {
		return due
	}
	floor := now.Add(min(every, max(d.policy.Renew/4, 5*time.Millisecond)))
	if latest.Before(floor) {
		return floor
	}
	return latest
}

// extendTimeout bounds one extend: the command timeout, and the wait for
// replicas when the domain has them.
func (d *Domain) extendTimeout() time.Duration {
	if d.policy.Replicas > 0 {
		return d.c.cmdTimeout + d.policy.ReplicaTimeout
	}
	return d.c.cmdTimeout
}

// observeRenewLag records how long after it was due a renewal was answered
// (the scheduler's lateness, a throttled process's stall and the round trip
// together) in the domain's renewLag: a high mark that decays by a quarter
// of the gap at each lower observation, capped at the extend timeout, since
// a longer one failed anyway.
func (d *Domain) observeRenewLag(lag time.Duration) {
	lag = min(max(lag, 0), d.extendTimeout())
	for {
		old := d.renewLag.Load()
		next := int64(lag)
		if next < old {
			next = old - (old-next)/4
		}
		if next == old || d.renewLag.CompareAndSwap(old, next) {
			return
		}
	}
}

// errNoLease is what the methods of a nil or zero Lease return: it was not
// made by an acquisition (a misuse, not a lost lock).
var errNoLease = errors.New("lockkit: no lease: a nil or zero *Lease (use the lease an Acquire or Do returned)")

// none reports whether l is nil or a zero Lease, which no acquisition made.
func (l *Lease) none() bool { return l == nil || l.lock.d == nil }

// closedDone is the Done channel of a nil or zero Lease: closed, since
// nothing is held.
var closedDone = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Key is the lock's key.
func (l *Lease) Key() string {
	if l == nil {
		return ""
	}
	return l.lock.key
}

// Token is this lease's owner id in the backend: 128 random bits,
// text-encoded.
func (l *Lease) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Fence is the fencing number issued with the lease, strictly increasing per
// key; 0 when the domain has no fencing. Pass it to the protected resource.
func (l *Lease) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Deadline is when the lease stops being valid unless renewed, on this
// process's monotonic clock.
func (l *Lease) Deadline() time.Time {
	if l.none() {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed once the lease is lost or released, or once Client.Close
// asks its holder to finish. It is a signal for work that waits; before a
// side effect, check Err, which also consults the clock.
func (l *Lease) Done() <-chan struct{} {
	if l.none() {
		return closedDone
	}
	return l.leaseCtx().Done()
}

// Err reports whether the lease may still be relied on. It is nil while the
// lease is held and its local deadline has not passed, and after a release by
// its holder. It is an error matching ErrLockLost once the lease is lost: an
// extend or release found another owner, or the deadline passed without a
// successful extend. Err consults the clock itself, so a holder that was
// paused past its deadline learns it here even before any background
// goroutine has run; call it right before a side effect.
//
// A check is no guarantee for the write that follows it: a holder can pause
// between Err and its write. Only the fence (Fence, checked by the resource
// with fence.Set or fence.Table) stops such a late write.
func (l *Lease) Err() error {
	if l.none() {
		return errNoLease
	}
	l.mu.Lock()
	expired := l.state == held && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if expired {
		l.markLost(l.lostAtDeadline())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return errcheck.Returned(l.lostErr)
}

// Valid reports whether the lease is held and within its local deadline:
// Err is nil and the lease was not released.
func (l *Lease) Valid() bool {
	if l.none() || l.Err() != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == held
}

func (l *Lease) deadlineErr() error {
	return fmt.Errorf("%w: %s: deadline passed without a successful extend", ErrLockLost, l.lock.key)
}

// Extend resets the lease's TTL now. It returns ErrNotHeld, and the lease is
// lost, when the key no longer holds this lease's token; ErrUnavailable when
// the backend cannot answer (the lease stays held until its deadline).
func (l *Lease) Extend(ctx context.Context) error {
	if l.none() {
		return errNoLease
	}
	if ctx == nil {
		return fmt.Errorf("lockkit: extend %s: %w", l.lock.key, errNilCtx)
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("lockkit: extend %s: %w: %w", l.lock.key, ErrNotHeld, err)
	}
	l.mu.Lock()
	st := l.state
	l.mu.Unlock()
	if st != held {
		return fmt.Errorf("lockkit: extend %s: %w", l.lock.key, ErrNotHeld)
	}
	return errcheck.Returned(l.extend(ctx))
}

func (l *Lease) extend(parent context.Context) error {
	d := l.lock.d
	ctx, span := l.hold.StartRenew(parent)
	var (
		ok  bool
		err error
	)
	sent := time.Now()
	// Never past the max hold: the last extends reach only the cap.
	ttl, capped, none := d.extendTTL(l.holdEnd, sent)
	if none {
		span.End(telnames.OutcomeOK, nil)
		l.mu.Lock()
		l.capped = true
		l.mu.Unlock()
		return nil
	}
	if re, yes := l.be.(driver.ReplicaExtender); yes && d.policy.Replicas > 0 {
		// The new expiry counts only once the replicas hold it: until then
		// a failover would bring back the old one (docs/semantics.md).
		ectx, cancel := context.WithTimeout(ctx, d.c.cmdTimeout+d.policy.ReplicaTimeout)
		ok, err = re.ExtendReplicas(ectx, l.lock.key, l.token, ttl, d.policy.Replicas, d.policy.ReplicaTimeout)
		cancel()
	} else {
		ectx, cancel := context.WithTimeout(ctx, d.c.cmdTimeout)
		ok, err = l.be.Extend(ectx, l.lock.key, l.token, ttl)
		cancel()
	}
	switch {
	case err != nil && errors.Is(err, context.Canceled) && parent.Err() != nil:
		// Cut short by its caller (Release or Close cancel the lease's ctx
		// under an in-flight renewal): not a backend failure.
		err = fmt.Errorf("lockkit: extend %s: %w", l.lock.key, err)
		span.End(telnames.OutcomeCanceled, err)
		return err
	case err != nil:
		err = fmt.Errorf("lockkit: extend %s: %w: %w", l.lock.key, ErrUnavailable, err)
		span.End(telnames.OutcomeUnavailable, err)
		return err
	case !ok:
		err = fmt.Errorf("lockkit: extend %s: %w", l.lock.key, ErrNotHeld)
		span.End(telnames.OutcomeRefused, err)
		l.markLost(telnames.LostRefused, fmt.Errorf("%w: %s: extend refused, the key no longer holds this lease", ErrLockLost, l.lock.key))
		return err
	}
	span.End(telnames.OutcomeOK, nil)
	l.mu.Lock()
	defer l.mu.Unlock()
	// An extend sent after the deadline extends nothing: the lease was
	// already lost on this clock (Err and onDeadline say so).
	if l.state == held && sent.Before(l.deadline) {
		if next := sent.Add(ttl - d.drift); next.After(l.deadline) {
			l.deadline = next
			d.c.sched.reset(&l.expiry, next)
		}
		l.capped = l.capped || capped
	}
	return nil
}

// renewNow extends the lease and schedules the next renewal: after
// Renew, or sooner when the domain's renewals run late (renewDue), or after
// a failed extend. A failed extend does not
// lose the lease; only the deadline does.
func (l *Lease) renewNow() {
	p := &l.lock.d.policy
	// The extend may not outlive the lease: past the deadline there is
	// nothing left to extend. Release cancels l.ctx and so the extend.
	ctx, cancel := context.WithDeadline(l.leaseCtx(), l.Deadline())
	err := l.extend(ctx)
	cancel()
	now := time.Now()
	l.mu.Lock()
	due := l.renewDue
	l.mu.Unlock()
	switch {
	case errors.Is(err, ErrNotHeld):
		return // lost; extend said so
	case err != nil:
		due = now.Add(max(p.Renew/4, 5*time.Millisecond))
	default:
		l.lock.d.observeRenewLag(now.Sub(due))
		due = l.lock.d.renewDue(now, l.Deadline(), p.Renew)
	}
	l.mu.Lock()
	if l.state == held && !l.noRenew && !l.capped {
		l.renewDue = due
		l.lock.d.c.sched.reset(&l.renew, due)
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
	l.markLost(l.lostAtDeadline())
}

func (l *Lease) markLost(why telnames.LostCause, cause error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	l.state = lost
	l.lostErr = cause
	l.stopTimers()
	l.mu.Unlock()
	// The client keeps nothing of a lost lease, and has let go of it by the
	// time Done closes: a holder that never calls Release leaks neither the
	// lease nor its span.
	l.lock.d.c.untrack(l)
	l.hold.Lost(why, cause)
	l.endHold(telnames.OutcomeLost, cause)
	l.end(cause)
	l.lock.d.c.log.WarnContext(l.logCtx, "lockkit: lease lost", "domain", l.lock.d.name, "key", l.lock.d.c.logKey(l.lock.key), "cause", l.lock.d.c.logErr(l.lock.key, cause))
	if why != telnames.LostRefused {
		// Lost on this clock (its deadline or its max hold), the key may
		// still hold this lease's token in the store: until its TTL there,
		// or, on PostgreSQL, for as long as its session lives, which other
		// leases on that session keep alive. Give it back now, so the next
		// acquirer gets the key at the loss and not when the holder
		// returns (owner-checked: a key anyone else holds is untouched).
		// A refused extend already found the key not this lease's.
		l.lock.d.c.background(func() { _, _ = l.lock.releaseToken(context.Background(), l.be, l.token) })
	}
}

// endHold ends the hold span once: at the release, or at the loss.
func (l *Lease) endHold(o telnames.Outcome, err error) {
	l.mu.Lock()
	ended := l.holdEnded
	l.holdEnded = true
	l.mu.Unlock()
	if !ended {
		l.hold.End(o, err)
	}
}

// stopTimers unqueues the deadline and the renewal; l.mu is held.
func (l *Lease) stopTimers() {
	s := &l.lock.d.c.sched
	s.stop(&l.expiry)
	s.stop(&l.renew)
}

// Release gives the lock back: an owner-checked delete that removes the key
// only if it still holds this lease's token. It returns ErrNotHeld when it
// does not (the lease expired, and maybe someone else holds the lock now);
// nothing is deleted then, and the lease counts as lost. Release stops the
// renewal either way. The delete is bounded by the client's command timeout,
// not by ctx, so a cancelled ctx never leaves the lock held.
func (l *Lease) Release(ctx context.Context) error {
	if l.none() {
		return errNoLease
	}
	if ctx == nil {
		return fmt.Errorf("lockkit: release %s: %w", l.lock.key, errNilCtx)
	}
	// A timer, not only a deadline: go-redis dials in a goroutine of its
	// own (retrying DialerRetries times, 100ms apart) and the caller leaves
	// that wait only when ctx is done (deadline.go).
	parent := ctx
	if ctx.Done() != nil {
		parent = context.WithoutCancel(ctx)
	}
	cctx, scope := l.lock.d.c.withCommandTimeout(parent, l.lock.d.c.cmdTimeout)
	defer scope.end()
	return errcheck.Returned(l.release(ctx, cctx, errReleased))
}

// release sends the delete under cctx; why is the lease ctx's cause.
func (l *Lease) release(ctx, cctx context.Context, why error) error {
	l.mu.Lock()
	if l.state == released {
		l.mu.Unlock()
		return fmt.Errorf("lockkit: release %s: already released: %w", l.lock.key, ErrNotHeld)
	}
	wasLost := l.state == lost
	l.state = released
	l.stopTimers()
	l.mu.Unlock()
	l.end(why)
	c := l.lock.d.c
	defer c.untrack(l)

	_, span := l.hold.StartRelease(ctx)
	var (
		ok  bool
		err error
	)
	if l.queue != nil {
		// Hand the lock to the next waiter and wake it, in the same script.
		ok, err = l.queue.QueueRelease(cctx, l.lock.key, l.token, l.previousOf())
	} else {
		ok, err = l.be.Release(cctx, l.lock.key, l.token)
	}
	outcome := telnames.OutcomeReleased
	var foundLost error
	switch {
	case err != nil:
		err = fmt.Errorf("lockkit: release %s: %w: %w (the lock expires by its TTL, or with its session on PostgreSQL)", l.lock.key, ErrUnavailable, err)
		outcome = telnames.OutcomeUnavailable
	case !ok:
		err = fmt.Errorf("lockkit: release %s: %w", l.lock.key, ErrNotHeld)
		outcome = telnames.OutcomeExpired
		if !wasLost {
			// The key held another token, or none: the lease had been lost
			// without this process noticing (a pause, a stolen key).
			foundLost = fmt.Errorf("%w: %s: the release found the key no longer held by this lease", ErrLockLost, l.lock.key)
			l.mu.Lock()
			l.lostErr = foundLost
			l.mu.Unlock()
		}
	}
	span.End(outcome, err)
	switch {
	case foundLost != nil:
		l.hold.Lost(telnames.LostRefused, foundLost)
		l.endHold(telnames.OutcomeLost, foundLost)
	case !wasLost && errors.Is(why, ErrLockLost) && errors.Is(why, ErrClosed):
		// Close released it under its holder, whose Err now reports the
		// loss: telemetry says the same (lost, cause closed).
		l.hold.Lost(telnames.LostClosed, why)
		l.endHold(telnames.OutcomeLost, why)
	default:
		l.endHold(outcome, err)
	}
	return err
}

// releaseUntracked gives back a lease that never started (client closed
// while it was being acquired): a counted acquisition's (dropToken).
func (l *Lease) releaseUntracked() {
	l.state = released
	l.end(errReleased)
	l.lock.dropToken(context.Background(), l.be, l.token)
}

// run is the body of Do and TryDo: fn under the lease, then release. It
// returns an error matching ErrLockLost whenever the lease stopped being
// valid before the release: lost while fn ran, past its deadline when fn
// returned (checked on the clock, not only by the background timer), or
// found by the release to be held by someone else.
func (l *Lease) run(fctx context.Context, fn func(context.Context, *Lease) error) (err error) {
	lctx := l.leaseCtx()
	stop := context.AfterFunc(lctx, func() { l.fnCancel(context.Cause(lctx)) })
	defer func() {
		stop()
		if lostErr := l.finishRun(fctx); lostErr != nil {
			err = errors.Join(lostErr, err)
		}
		err = errcheck.Returned(err)
	}()
	return fn(fctx, l)
}

// finishRun ends a lease that Do (or DoAll) ran fn under: it releases the
// lease and returns its loss, if it stopped being valid before the release
// (the clock, or a release that found another owner); a release that failed
// otherwise is logged. Close, waiting on runDone, learns the lease is done.
func (l *Lease) finishRun(ctx context.Context) error {
	l.fnCancel(nil)
	return l.finishRunAfter(ctx, l.Err())
}

// finishRunAfter is finishRun once fn's ctx is cancelled and the lease's
// validity read (lostErr, nil when it was valid).
func (l *Lease) finishRunAfter(ctx context.Context, lostErr error) error {
	rerr := l.Release(ctx)
	if lostErr == nil && errors.Is(rerr, ErrNotHeld) {
		lostErr = l.Err() // the release found the lease lost
	}
	if rerr != nil && lostErr == nil {
		l.lock.d.c.log.WarnContext(l.logCtx, "lockkit: release failed", "domain", l.lock.d.name, "key", l.lock.d.c.logKey(l.lock.key), "error", l.lock.d.c.logErr(l.lock.key, rerr))
	}
	l.doneRun(rerr)
	return lostErr
}

// doneRun tells a Close waiting on runDone that Do is done with the lease,
// and whether its release left the lock held (rerr, unless ErrNotHeld).
func (l *Lease) doneRun(rerr error) {
	if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		l.runErr = rerr
	}
	close(l.runDone)
}
