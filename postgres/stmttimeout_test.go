package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// stmtTimeout is the statement_timeout of the application's pool in
// TestStatementTimeoutOnPool: far shorter than the waits below.
const stmtTimeout = "200ms"

// poolSetting is setting as each idle connection of pool reads it.
func poolSetting(t *testing.T, pool *pgxpool.Pool, setting string) []string {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	conns := pool.AcquireAllIdle(ctx)
	var got []string
	for _, c := range conns {
		var v string
		if err := c.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
		c.Release()
	}
	return got
}

// TestStatementTimeoutOnPool: an application that sets statement_timeout on
// the pool it gives lockkit (here in the DSN, as pgx reads it; a role's or a
// database's setting acts the same) must not have lockkit's own statements
// cancelled by it. Before, the server cancelled them (SQLSTATE 57014), which
// lockkit took as a session ended: a FIFO wait longer than the timeout failed,
// and a renewal held up longer than it closed its session, losing every lease
// on it. Now lockkit's sessions run with statement_timeout 0 and give their
// connection back to the pool with the application's setting.
func TestStatementTimeoutOnPool(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	holder := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	pool := testserver.PgxPool(t, pg.DSN()+"&statement_timeout="+stmtTimeout, 4)
	var st string
	if err := pool.QueryRow(ctxT(t, 5*time.Second), "SELECT current_setting('statement_timeout')").Scan(&st); err != nil || st != stmtTimeout {
		t.Fatalf("the application's pool reads statement_timeout %q (%v); want %s (the test's premise)", st, err, stmtTimeout)
	}
	c := newClient(t, pool)
	ctx := ctxT(t, 60*time.Second)

	// fifoAfterHold: c waits in a FIFO domain while holder keeps the key
	// 5× the statement timeout, then releases it; c must get the key.
	fifoAfterHold := func(t *testing.T, id string) {
		t.Helper()
		h, err := lockOf(holder, "fifo", fifoPolicy(10*time.Second, 10*time.Second), id).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan time.Time, 1)
		go func() {
			waitQueued(t, admin, h.Key(), 1)
			// c's one request stays in PostgreSQL's queue while held: a
			// cancelled wait leaves it, and the Client's retry comes back
			// at the end of the line.
			for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if n := queued(t, admin, h.Key()); n != 1 {
					t.Errorf("%d requests wait for the key %v after c's joined the queue; want c's, throughout the hold", n, time.Until(end))
					break
				}
			}
			released <- time.Now()
			if err := h.Release(ctx); err != nil {
				t.Errorf("holder release: %v", err)
			}
		}()
		start := time.Now()
		l, err := lockOf(c, "fifo", fifoPolicy(10*time.Second, 10*time.Second), id).Acquire(ctx)
		if err != nil {
			t.Fatalf("FIFO wait under a pool statement_timeout of %s, held by another for 1s: %v after %v; want the lease once it is released",
				stmtTimeout, err, time.Since(start))
		}
		if at := <-released; time.Now().Before(at) {
			t.Fatalf("granted before the holder released")
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A FIFO wait that runs out (max_wait) on a connection new to lockkit
	// (c has no session yet): ErrNotAcquired at max_wait, not the
	// statement timeout's cancel at 200ms and a retry; its connection goes
	// back with the application's setting (GivenBackAsItCame).
	t.Run("FIFOWaitRunsOut", func(t *testing.T) {
		h, err := lockOf(holder, "fifo", fifoPolicy(10*time.Second, 10*time.Second), "out").TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := h.Release(ctx); err != nil {
				t.Errorf("holder release: %v", err)
			}
		}()
		const maxWait = 1500 * time.Millisecond
		left := make(chan int, 1)
		go func() {
			waitQueued(t, admin, h.Key(), 1)
			for end := time.Now().Add(maxWait * 2 / 3); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if n := queued(t, admin, h.Key()); n != 1 {
					left <- n
					return
				}
			}
			left <- 1
		}()
		start := time.Now()
		_, err = lockOf(c, "fifo", fifoPolicy(10*time.Second, maxWait), "out").Acquire(ctx)
		took := time.Since(start)
		if !errors.Is(err, lockkit.ErrNotAcquired) || took < maxWait*95/100 {
			t.Fatalf("FIFO wait with max_wait %v on a held key: %v after %v; want ErrNotAcquired at max_wait", maxWait, err, took)
		}
		if n := <-left; n != 1 {
			t.Errorf("%d requests waited for the key during c's wait; want c's one, in the queue until max_wait", n)
		}
	})
	// A FIFO wait on a connection new to lockkit.
	t.Run("FIFOWaitNewConnection", func(t *testing.T) { fifoAfterHold(t, "new") })
	// A FIFO wait on a session lockkit already has open and empty: a
	// poll-domain lock opens it, and its release leaves it lingering.
	t.Run("FIFOWaitOpenSession", func(t *testing.T) {
		l, err := lockOf(c, "poll", lockkit.Policy{TTL: 5 * time.Second}, "open").TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		fifoAfterHold(t, "open")
	})

	// A renewal held up 6× the statement timeout (another transaction
	// keeps the lease's record locked) must answer when it is let go, and
	// the lease stays valid; so does another lease on the same session.
	t.Run("RenewalHeldUp", func(t *testing.T) {
		p := lockkit.Policy{TTL: 3 * time.Second}
		a, b, pid := twoOnOneSession(t, ctx, c, admin, "renew", p)
		// The session's check (a's extend, which b's renewal may join)
		// waits on the rows for 1.2s once it is seen waiting.
		letGo := holdCheck(t, ctx, admin, a, pid)
		time.Sleep(1200 * time.Millisecond)
		t.Logf("a's extend, held up: %v", letGo())
		time.Sleep(1500 * time.Millisecond) // past the next renewal
		for _, l := range []*lockkit.Lease{a, b} {
			if !l.Valid() {
				t.Errorf("lease %s lost after its renewal waited 1.2s under statement_timeout %s: %v; want it kept", l.Key(), stmtTimeout, l.Err())
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("release %s: %v", l.Key(), err)
			}
		}
	})

	// Every connection lockkit gave back reads the application's setting
	// again, once its sessions have lingered out (1s empty).
	t.Run("GivenBackAsItCame", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for pool.Stat().AcquiredConns() > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still out of the pool 10s after the last release", pool.Stat().AcquiredConns())
			}
			time.Sleep(20 * time.Millisecond)
		}
		got := poolSetting(t, pool, "statement_timeout")
		if made := pool.Stat().NewConnsCount(); int64(len(got)) != made {
			t.Errorf("%d of the %d connections the pool opened are back in it; want all (lockkit closed the others)", len(got), made)
		}
		for _, v := range got {
			if v != stmtTimeout {
				t.Errorf("a connection lockkit gave back reads statement_timeout %q; want the pool's %s", v, stmtTimeout)
			}
		}
	})
}
