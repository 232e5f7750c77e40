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

// sharedSession is the backend pid whose session carries both leases; the
// test stops when they are on different sessions (its premise).
func sharedSession(t *testing.T, admin *pgxpool.Pool, a, b *lockkit.Lease) int {
	t.Helper()
	pa, pb := holderPID(t, admin, a.Key()), holderPID(t, admin, b.Key())
	if pa == 0 || pa != pb {
		t.Fatalf("the two leases are on sessions %d and %d; want one shared session (the test's premise)", pa, pb)
	}
	return pa
}

// lockRecords locks every lease record in a transaction of admin's, which
// holds up any lockkit statement that writes one (a renewal, a release)
// until commit is called.
func lockRecords(t *testing.T, ctx context.Context, admin *pgxpool.Pool) (commit func()) {
	t.Helper()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM lockkit_leases FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
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

	a, err := lockOf(c, "busy", p, "a").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lockOf(c, "busy", p, "b").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := sharedSession(t, admin, a, b)

	// Hold the session's next statement up: b's renewal waits on the
	// leases' rows, which another transaction keeps locked.
	commit := lockRecords(t, ctx, admin)
	extended := make(chan error, 1)
	go func() { extended <- b.Extend(ctx) }()
	waitLockWait(t, admin, pid)

	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = a.Release(rctx)
	cancel()
	t.Logf("release while the session is busy: %v", err)
	commit()
	freed := time.Now()
	// The manual extend may have given up at the command timeout; the
	// check it joined goes on, and b stays valid (asserted below).
	t.Logf("b's extend, held up: %v", <-extended)

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
