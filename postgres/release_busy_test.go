package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// waitLockWait waits (bounded) until backend pid waits on a lock: a
// statement of its session is in flight, held up by another transaction.
func waitLockWait(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ev string
		err := admin.QueryRow(ctxT(t, 5*time.Second), `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&ev)
		if err != nil {
			t.Fatal(err)
		}
		if ev == "Lock" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d never waited on a lock (wait_event_type %q)", pid, ev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// twoOnOneSession acquires lock ids a and b of domain on c, and the backend
// pid of the one session that carries both; the test stops when they are on
// different sessions (its premise: c has WithMaxHeld(1) or one lease each).
func twoOnOneSession(t *testing.T, ctx context.Context, c *lockkit.Client, admin *pgxpool.Pool, domain string, p lockkit.Policy) (a, b *lockkit.Lease, pid int) {
	t.Helper()
	a, err := lockOf(c, domain, p, "a").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err = lockOf(c, domain, p, "b").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := holderPID(t, admin, a.Key()), holderPID(t, admin, b.Key())
	if pa == 0 || pa != pb {
		t.Fatalf("the two leases are on sessions %d and %d; want one shared session (the test's premise)", pa, pb)
	}
	return a, b, pa
}

// holdCheck holds up the next statement of l's session (pid): another
// transaction of admin's locks every lease record, and l's extend joins a
// check of the session, which waits on them; holdCheck returns once that
// check is seen waiting. letGo commits the transaction and returns the
// extend's outcome (an extend may give up at the command timeout; the check
// goes on).
func holdCheck(t *testing.T, ctx context.Context, admin *pgxpool.Pool, l *lockkit.Lease, pid int) (letGo func() error) {
	t.Helper()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM lockkit_leases FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx) }()
	waitLockWait(t, admin, pid)
	return func() error {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return <-extended
	}
}

// TestReleaseOnABusySession: a release whose shared session is busy with
// another statement until the release's ctx ends (here a renewal held up
// behind a row lock) must still free its key once that statement ends, while
// the session's other lease lives on. Before, the session was only marked to
// close once its last other lease was gone: the released key stayed locked
// on the server for as long as the other lease was held (a leader's term,
// say), and nobody else could take it.
func TestReleaseOnABusySession(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 4), postgres.WithMaxHeld(1))
	other := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	ctx := ctxT(t, 60*time.Second)
	p := lockkit.Policy{TTL: 10 * time.Second}

	a, b, pid := twoOnOneSession(t, ctx, c, admin, "busy", p)
	// Hold the session's next statement up: b's renewal waits on the
	// leases' rows, which another transaction keeps locked.
	letGo := holdCheck(t, ctx, admin, b, pid)

	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := a.Release(rctx)
	cancel()
	t.Logf("release while the session is busy: %v", err)
	t.Logf("b's extend, held up: %v", letGo()) // b stays valid: asserted below
	freed := time.Now()

	theirs := lockOf(other, "busy", p, "a")
	var got *lockkit.Lease
	for got == nil {
		got, err = theirs.TryAcquire(ctx)
		if err != nil && time.Since(freed) > 5*time.Second {
			t.Fatalf("another client still cannot take the released key 5s after the session's statement ended (%v); the session's other lease is held (valid %v)", err, b.Valid())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("another client got the released key %v after the session's statement ended", time.Since(freed).Round(time.Millisecond))
	if !b.Valid() {
		t.Errorf("the session's other lease was lost: %v; want it held", b.Err())
	}
	if err := got.Release(ctx); err != nil {
		t.Error(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Error(err)
	}
}
