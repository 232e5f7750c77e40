package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// Guarantee 1 when the server frees a lock its holder still counts valid:
// the holder's session is ended by pg_terminate_backend, or the server is
// killed (SIGKILL) and restarted. The lease record (lockkit_leases) keeps
// every new holder out until the earlier lease's deadline has passed on its
// own terms (Chubby's lock-delay): B's grant comes no earlier than A's
// deadline as A's client computed it, and A is invalid by then. A clean
// release lets B in at once.

// delayTTL is long enough that a restart (about a second) falls inside it.
const delayTTL = 3 * time.Second

// pollGrant takes lk with single attempts until one succeeds (for at most
// 20s; the pool's connections may fail once each after a restart), and
// returns the lease and when the granting attempt returned.
func pollGrant(t *testing.T, lk lockkit.Lock) (*lockkit.Lease, time.Time) {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < 20*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l, err := lk.TryAcquire(ctx)
		cancel()
		if err == nil {
			return l, time.Now()
		}
		last = err
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: not granted within 20s: %v", lk.Key(), last)
	return nil, time.Time{}
}

// checkNoOverlap asserts that b was granted no earlier than a's deadline and
// that a was invalid when b's grant returned.
func checkNoOverlap(t *testing.T, what string, a *lockkit.Lease, aDeadline, ended, granted time.Time) {
	t.Helper()
	aValid := a.Valid()
	t.Logf("%s: B granted %v after the session ended; A's deadline was %v after it; B's grant - A's deadline = %v; A valid at B's grant: %v",
		what, granted.Sub(ended).Round(time.Millisecond), aDeadline.Sub(ended).Round(time.Millisecond),
		granted.Sub(aDeadline).Round(time.Millisecond), aValid)
	if granted.Before(aDeadline) {
		t.Errorf("%s: B granted %v before A's deadline: two leases valid at once", what, aDeadline.Sub(granted).Round(time.Millisecond))
	}
	if aValid {
		t.Errorf("%s: A still valid when B's grant returned", what)
	}
}

func terminate(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	var ok bool
	if err := admin.QueryRow(ctxT(t, 5*time.Second), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
}

func TestLockDelay(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	// Renewal rarely, so that A's client counts its lease valid up to its
	// deadline unless told otherwise: the strictest case.
	p := lockkit.Policy{TTL: delayTTL, Renew: delayTTL * 8 / 10, Retry: retry}

	for _, fencing := range []bool{false, true} {
		name := "plain"
		if fencing {
			name = "fencing"
		}
		p := p
		p.Fencing = fencing
		t.Run("Terminated/"+name, func(t *testing.T) {
			ca := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
			cb := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
			a, err := lockOf(ca, "delay-"+name, p, "t").Acquire(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// An extend moves A's deadline, and the record, forward.
			time.Sleep(300 * time.Millisecond)
			if err := a.Extend(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			aDeadline := a.Deadline()
			terminate(t, admin, holderPID(t, admin, a.Key()))
			ended := time.Now()
			b, granted := pollGrant(t, lockOf(cb, "delay-"+name, p, "t"))
			checkNoOverlap(t, "terminated", a, aDeadline, ended, granted)
			if fencing && b.Fence() <= a.Fence() {
				t.Errorf("fence %d after %d", b.Fence(), a.Fence())
			}
			_ = b.Release(ctxT(t, 5*time.Second)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
			_ = a.Release(ctxT(t, 5*time.Second)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
		})
	}

	t.Run("TerminatedFIFO", func(t *testing.T) {
		ca := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		cb := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		fp := fifoPolicy(delayTTL, 10*time.Second)
		fp.Renew = p.Renew
		a, err := lockOf(ca, "delay-fifo", fp, "t").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		aDeadline := a.Deadline()
		terminate(t, admin, holderPID(t, admin, a.Key()))
		ended := time.Now()
		b, err := lockOf(cb, "delay-fifo", fp, "t").Acquire(ctxT(t, 15*time.Second))
		if err != nil {
			t.Fatalf("a FIFO waiter after the termination: %v", err)
		}
		checkNoOverlap(t, "terminated, B waits in the queue", a, aDeadline, ended, time.Now())
		_ = b.Release(ctxT(t, 5*time.Second)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
	})

	t.Run("CleanRelease", func(t *testing.T) {
		ca := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		cb := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		for _, fp := range []lockkit.Policy{p, fifoPolicy(delayTTL, 10*time.Second)} {
			a, err := lockOf(ca, "delay-clean", fp, "c").Acquire(ctxT(t, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Extend(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := a.Release(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			// The first single attempt succeeds: no lock-delay after a
			// release.
			b, err := lockOf(cb, "delay-clean", fp, "c").TryAcquire(ctxT(t, 5*time.Second))
			if err != nil {
				t.Fatalf("wait %v: TryAcquire right after a clean release: %v", fp.Wait, err)
			}
			if err := b.Release(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		// A FIFO waiter queued before the release (its statement, and its
		// snapshot, older than the release) is granted at the release, not
		// at the released lease's deadline.
		fp := fifoPolicy(delayTTL, 10*time.Second)
		a, err := lockOf(ca, "delay-clean", fp, "q").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		var granted time.Time
		go func() {
			b, err := lockOf(cb, "delay-clean", fp, "q").Acquire(ctxT(t, 15*time.Second))
			granted = time.Now()
			if err == nil {
				err = b.Release(ctxT(t, 5*time.Second))
			}
			got <- err
		}()
		time.Sleep(300 * time.Millisecond) // B waits in the queue
		aDeadline := a.Deadline()
		if err := a.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("FIFO waiter: %v", err)
		}
		if !granted.Before(aDeadline) {
			t.Errorf("FIFO waiter granted %v after the released lease's deadline: a clean release was delayed", granted.Sub(aDeadline))
		}
	})

	t.Run("DoTxTerminated", func(t *testing.T) {
		// A DoTx holder's transaction is terminated: B (a session lock)
		// waits for the DoTx lease's deadline too.
		pool := testserver.PgxPool(t, pg.DSN(), 4)
		ca := newClient(t, pool)
		cb := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		held := make(chan *lockkit.Lease, 1)
		done := make(chan error, 1)
		var told atomic.Int64 // when fn was told of the loss (UnixNano)
		go func() {
			done <- postgres.DoTx(ctxT(t, 20*time.Second), pool, lockOf(ca, "delay-tx", p, "t"), func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
				held <- lease
				<-ctx.Done()
				told.Store(time.Now().UnixNano())
				return context.Cause(ctx)
			})
		}()
		var a *lockkit.Lease
		select {
		case a = <-held:
		case err := <-done:
			t.Fatalf("DoTx: %v", err)
		}
		aDeadline := a.Deadline()
		terminate(t, admin, holderPID(t, admin, a.Key()))
		ended := time.Now()
		b, granted := pollGrant(t, lockOf(cb, "delay-tx", p, "t"))
		// DoTx drops its record once its Do knows the lease is lost (a
		// renewal found the transaction gone): the lease ends then, before
		// its deadline, and B may come in from then on.
		if n := told.Load(); n != 0 && time.Unix(0, n).Before(aDeadline) {
			t.Logf("DoTx terminated: A told of the loss %v after the session ended, before its deadline", time.Unix(0, n).Sub(ended).Round(time.Millisecond))
			if granted.Before(time.Unix(0, n)) {
				t.Errorf("DoTx terminated: B granted before A was told of its loss")
			}
			aDeadline = time.Unix(0, n)
		}
		checkNoOverlap(t, "DoTx terminated", a, aDeadline, ended, granted)
		_ = b.Release(ctxT(t, 5*time.Second)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
		if err := <-done; err == nil {
			t.Error("DoTx whose session was terminated returned nil")
		}
	})

	t.Run("DoTxAfterTerminated", func(t *testing.T) {
		// A session lock is terminated: a DoTx waits for its deadline.
		ca := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		pool := testserver.PgxPool(t, pg.DSN(), 4)
		cb := newClient(t, pool)
		a, err := lockOf(ca, "delay-tx2", p, "t").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		aDeadline := a.Deadline()
		terminate(t, admin, holderPID(t, admin, a.Key()))
		ended := time.Now()
		var granted time.Time
		err = postgres.DoTx(ctxT(t, 20*time.Second), pool, lockOf(cb, "delay-tx2", p, "t"), func(ctx context.Context, tx pgx.Tx, lease *lockkit.Lease) error {
			granted = time.Now()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		checkNoOverlap(t, "DoTx after a terminated holder", a, aDeadline, ended, granted)
	})

	t.Run("Crash", func(t *testing.T) {
		// Last: it restarts the server. The TTL outlasts a restart on a
		// loaded machine (2.9s measured).
		cp := lockkit.Policy{TTL: 10 * time.Second, Renew: 8 * time.Second, Retry: retry}
		ca := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		cb := newClient(t, testserver.PgxPool(t, pg.DSN(), 4))
		a, err := lockOf(ca, "delay-crash", cp, "k").Acquire(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		aDeadline := a.Deadline()
		pg.Kill(t)
		ended := time.Now()
		pg.Restart(t)
		t.Logf("crash: server back %v after the kill", time.Since(ended).Round(time.Millisecond))
		b, granted := pollGrant(t, lockOf(cb, "delay-crash", cp, "k"))
		checkNoOverlap(t, "postmaster killed and restarted", a, aDeadline, ended, granted)
		_ = b.Release(ctxT(t, 5*time.Second)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
		_ = a.Release(ctxT(t, 5*time.Second)) //lockkit-vet:ignore test clean-up: the lease may already be lost, which is not what this test checks
	})
}
