package pgbackend_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestBackend runs the cases that share one server; the ones that stop,
// pause or restart it have their own.
func TestBackend(t *testing.T) {
	pg := startPG(t)
	dsn := pg.DSN()

	t.Run("BadInput", func(t *testing.T) {
		pool := testserver.PgxPool(t, dsn, 2)
		b := newBackend(t, pool, pgbackend.Options{})
		ctx := ctxT(t, 5*time.Second)
		for _, c := range []struct {
			name string
			req  *driver.Request
			want string
		}{
			{"nil", nil, "nil request"},
			{"empty key", &driver.Request{Token: "t", TTL: time.Second}, "empty lock key"},
			{"zero ttl", &driver.Request{Key: "k", Token: "t"}, "not positive"},
			{"negative ttl", &driver.Request{Key: "k", Token: "t", TTL: -time.Second}, "not positive"},
			{"sub-ms ttl", &driver.Request{Key: "k", Token: "t", TTL: 999 * time.Microsecond}, "under a millisecond"},
			{"huge ttl", &driver.Request{Key: "k", Token: "t", TTL: 30 * 24 * time.Hour}, "largest idle limit"},
			{"empty token", &driver.Request{Key: "k", TTL: time.Second}, "empty token"},
		} {
			_, err := b.Acquire(ctx, c.req)
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, driver.ErrContended) {
				t.Errorf("%s: Acquire err = %v, want one containing %q", c.name, err, c.want)
			}
		}
		if _, _, err := b.AcquireWait(ctx, req("k", time.Second, false), 0); err == nil {
			t.Error("AcquireWait with maxWait 0: no error")
		}
		if _, err := b.Extend(ctx, "", "t", time.Second); err == nil {
			t.Error("Extend with empty key: no error")
		}
		if _, err := b.Extend(ctx, "k", "t", 0); err == nil {
			t.Error("Extend with zero ttl: no error")
		}
		if _, err := b.Release(ctx, "", "t"); err == nil {
			t.Error("Release with empty key: no error")
		}
		if _, err := pgbackend.New(nil, pgbackend.Options{}); err == nil {
			t.Error("New(nil pool): no error")
		}
		if _, err := pgbackend.New(pool, pgbackend.Options{MaxHeld: 3}); err == nil {
			t.Error("New with MaxHeld over the pool's MaxConns: no error")
		}
		if _, err := pgbackend.AcquireTx(ctx, nil, "k", time.Second, false); err == nil {
			t.Error("AcquireTx(nil tx): no error")
		}
		if err := pgbackend.Migrate(ctx, nil); err == nil {
			t.Error("Migrate(nil): no error")
		}
		if b.Held() != 0 {
			t.Errorf("Held() = %d after refused requests", b.Held())
		}
	})

	t.Run("ContendedExtendRelease", func(t *testing.T) {
		pool1, pool2 := testserver.PgxPool(t, dsn, 4), testserver.PgxPool(t, dsn, 4)
		b1, b2 := newBackend(t, pool1, pgbackend.Options{}), newBackend(t, pool2, pgbackend.Options{})
		ctx := ctxT(t, 10*time.Second)
		r := req("lock:contended", 10*time.Second, false)
		if f := mustAcquire(t, b1, r); f != 0 {
			t.Errorf("fence without fencing = %d, want 0", f)
		}
		mustContend(t, b2, req(r.Key, time.Second, false)) // another pool: PostgreSQL says held
		mustContend(t, b1, req(r.Key, time.Second, false)) // this backend, another token
		if held, err := b1.Extend(ctx, r.Key, r.Token, r.TTL); !held || err != nil {
			t.Fatalf("Extend by holder = %v, %v", held, err)
		}
		if held, err := b1.Extend(ctx, r.Key, "other", r.TTL); held || err != nil {
			t.Fatalf("Extend with another token = %v, %v; want false, nil", held, err)
		}
		if held, err := b1.Release(ctx, r.Key, "other"); held || err != nil {
			t.Fatalf("Release with another token = %v, %v; want false, nil", held, err)
		}
		if pid := holderPID(t, pool2, r.Key); pid == 0 {
			t.Fatal("a release with the wrong token freed the lock")
		}
		if held, err := b1.Release(ctx, r.Key, r.Token); !held || err != nil {
			t.Fatalf("Release = %v, %v", held, err)
		}
		if held, err := b1.Release(ctx, r.Key, r.Token); held || err != nil {
			t.Fatalf("second Release = %v, %v; want false, nil", held, err)
		}
		if held, err := b1.Extend(ctx, r.Key, r.Token, r.TTL); held || err != nil {
			t.Fatalf("Extend after Release = %v, %v; want false, nil", held, err)
		}
		r2 := req(r.Key, time.Second, false)
		mustAcquire(t, b2, r2)
		if held, err := b2.Release(ctx, r2.Key, r2.Token); !held || err != nil {
			t.Fatalf("Release = %v, %v", held, err)
		}
	})

	t.Run("ExtendMovesIdleLimit", func(t *testing.T) {
		pool := testserver.PgxPool(t, dsn, 2)
		b := newBackend(t, pool, pgbackend.Options{MaxHeld: 1})
		ctx := ctxT(t, 10*time.Second)
		r := req("lock:ttl-change", 200*time.Millisecond, false)
		mustAcquire(t, b, r)
		if held, err := b.Extend(ctx, r.Key, r.Token, 5*time.Second); !held || err != nil {
			t.Fatalf("Extend to 5s = %v, %v", held, err)
		}
		time.Sleep(400 * time.Millisecond) // past the first ttl: the session must live on
		if held, err := b.Extend(ctx, r.Key, r.Token, 5*time.Second); !held || err != nil {
			t.Fatalf("Extend 400ms after moving the idle limit from 200ms to 5s = %v, %v", held, err)
		}
		if held, err := b.Release(ctx, r.Key, r.Token); !held || err != nil {
			t.Fatalf("Release = %v, %v", held, err)
		}
	})

	// A renewal moves the record of the lease that asked, not the record of
	// every lease on its session: on a session carrying thousands of
	// leases, whose renewals come one after another, that was a row write
	// per lease per check, and the renewals fell behind on a loaded machine
	// (TestManyLocksPerSession in postgres lost a lease at its deadline).
	// A lease that did not ask still learns at the check that its lock is
	// held: it stays held, and its own Extend moves its record.
	t.Run("ExtendMovesOnlyItsRecord", func(t *testing.T) {
		pool := testserver.PgxPool(t, dsn, 2)
		admin := testserver.PgxPool(t, dsn, 1)
		b := newBackend(t, pool, pgbackend.Options{MaxHeld: 1}) // one session carries all three
		ctx := ctxT(t, 20*time.Second)
		rs := []*driver.Request{req("lock:only-a", 5*time.Second, false), req("lock:only-b", 5*time.Second, false), req("lock:only-c", 5*time.Second, false)}
		for _, r := range rs {
			mustAcquire(t, b, r)
		}
		if b.Sessions() != 1 {
			t.Fatalf("%d sessions, want the three leases on one", b.Sessions())
		}
		expires := func() []time.Time {
			t.Helper()
			out := make([]time.Time, len(rs))
			for i, r := range rs {
				if err := admin.QueryRow(ctx, "SELECT expires FROM lockkit_leases WHERE id = $1 AND token = $2",
					pgbackend.KeyID(r.Key), r.Token).Scan(&out[i]); err != nil {
					t.Fatalf("record of %s: %v", r.Key, err)
				}
			}
			return out
		}
		before := expires()
		time.Sleep(50 * time.Millisecond)
		if held, err := b.Extend(ctx, rs[0].Key, rs[0].Token, rs[0].TTL); !held || err != nil {
			t.Fatalf("Extend of %s = %v, %v", rs[0].Key, held, err)
		}
		after := expires()
		if !after[0].After(before[0]) {
			t.Errorf("the extended lease's record expires %v, not after %v", after[0], before[0])
		}
		for i := 1; i < len(rs); i++ {
			if !after[i].Equal(before[i]) {
				t.Errorf("%s did not ask, but its record moved from %v to %v", rs[i].Key, before[i], after[i])
			}
		}
		// The leases that did not ask are still held, and their own
		// extends move their records.
		for _, r := range rs[1:] {
			if held, err := b.Extend(ctx, r.Key, r.Token, r.TTL); !held || err != nil {
				t.Fatalf("Extend of %s after the check of another = %v, %v", r.Key, held, err)
			}
		}
		final := expires()
		for i := 1; i < len(rs); i++ {
			if !final[i].After(before[i]) {
				t.Errorf("%s's own Extend left its record at %v", rs[i].Key, final[i])
			}
		}
		if b.Held() != len(rs) {
			t.Fatalf("Held() = %d, want %d", b.Held(), len(rs))
		}
		for _, r := range rs {
			if held, err := b.Release(ctx, r.Key, r.Token); !held || err != nil {
				t.Fatalf("Release of %s = %v, %v", r.Key, held, err)
			}
		}
	})

	t.Run("ReleasedSessionIsClean", func(t *testing.T) {
		// One connection: the one that held the lock is the one the
		// application gets next.
		pool := testserver.PgxPool(t, dsn, 1)
		ctx := ctxT(t, 10*time.Second)
		if _, err := pool.Exec(ctx, "SET idle_session_timeout = '1h'"); err != nil {
			t.Fatal(err)
		}
		b := newBackend(t, pool, pgbackend.Options{})
		for _, fencing := range []bool{false, true} {
			r := req("lock:clean", 2*time.Second, fencing)
			mustAcquire(t, b, r)
			if held, err := b.Release(ctx, r.Key, r.Token); !held || err != nil {
				t.Fatalf("Release = %v, %v", held, err)
			}
			var idle string
			var locks int
			err := pool.QueryRow(ctx, `SELECT current_setting('idle_session_timeout'),
				(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())`).Scan(&idle, &locks)
			if err != nil {
				t.Fatal(err)
			}
			if idle != "1h" || locks != 0 {
				t.Fatalf("after release (fencing %v) the pool's session has idle_session_timeout %q (want the application's 1h) and %d advisory locks (want 0)", fencing, idle, locks)
			}
			// A contended attempt leaves the session as it was too.
			other := testserver.PgxPool(t, dsn, 1)
			bo := newBackend(t, other, pgbackend.Options{})
			ro := req(r.Key, time.Minute, fencing)
			mustAcquire(t, bo, ro)
			mustContend(t, b, req(r.Key, 3*time.Second, fencing))
			if err := pool.QueryRow(ctx, "SELECT current_setting('idle_session_timeout')").Scan(&idle); err != nil || idle != "1h" {
				t.Fatalf("after a contended attempt idle_session_timeout = %q, %v; want 1h", idle, err)
			}
			if _, err := bo.Release(ctx, ro.Key, ro.Token); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("SessionsAreReentrantSoLeasesGetTheirOwn", func(t *testing.T) {
		ctx := ctxT(t, 10*time.Second)
		// The hazard: one session takes the same advisory lock twice.
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		id := pgbackend.KeyID("lock:reentrant")
		var a, c bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1), pg_try_advisory_lock($1)", id).Scan(&a, &c); err != nil || !a || !c {
			t.Fatalf("one session taking a lock twice: %v %v %v (the test assumes PostgreSQL's re-entrancy)", a, c, err)
		}
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
			t.Fatal(err)
		}
		// Two backends on one pool (no shared in-process state): the second
		// goroutine is refused by PostgreSQL itself, because each lease holds
		// a session of its own.
		pool := testserver.PgxPool(t, dsn, 2)
		b1 := newBackend(t, pool, pgbackend.Options{MaxHeld: 1})
		b2 := newBackend(t, pool, pgbackend.Options{MaxHeld: 1})
		r := req("lock:reentrant", 5*time.Second, true)
		var wg sync.WaitGroup
		var got [2]error
		for i, b := range []*pgbackend.Backend{b1, b2} {
			wg.Go(func() { _, got[i] = b.Acquire(ctx, req(r.Key, r.TTL, true)) })
		}
		wg.Wait()
		if (got[0] == nil) == (got[1] == nil) {
			t.Fatalf("two goroutines on one pool: errors %v and %v; want exactly one grant", got[0], got[1])
		}
		for _, err := range got {
			if err != nil && !errors.Is(err, driver.ErrContended) {
				t.Fatalf("the refused one: %v, want ErrContended", err)
			}
		}
	})

	t.Run("FenceNotBumpedWhenContended", func(t *testing.T) {
		pool1, pool2 := testserver.PgxPool(t, dsn, 2), testserver.PgxPool(t, dsn, 2)
		b1, b2 := newBackend(t, pool1, pgbackend.Options{}), newBackend(t, pool2, pgbackend.Options{})
		ctx := ctxT(t, 20*time.Second)
		r := req("lock:fence-contended", 10*time.Second, true)
		f1 := mustAcquire(t, b1, r)
		if s := storedFence(t, pool2, r.Key); s != f1 {
			t.Fatalf("stored fence %d, issued %d", s, f1)
		}
		for range 50 {
			mustContend(t, b2, req(r.Key, time.Second, true))
		}
		// Queued attempts that time out must not bump it either.
		for range 3 {
			_, _, err := b2.AcquireWait(ctx, req(r.Key, time.Second, true), 20*time.Millisecond)
			if !errors.Is(err, driver.ErrContended) {
				t.Fatalf("AcquireWait on a held key: %v, want ErrContended", err)
			}
		}
		// And transactions that are refused.
		tx, err := pool2.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := pgbackend.AcquireTx(ctx, tx, r.Key, time.Second, true); !errors.Is(err, driver.ErrContended) {
			t.Fatalf("AcquireTx on a held key: %v, want ErrContended", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit after a refused AcquireTx (tx must stay usable): %v", err)
		}
		if s := storedFence(t, pool2, r.Key); s != f1 {
			t.Fatalf("after 54 refused attempts the stored fence is %d, was %d", s, f1)
		}
		if _, err := b1.Release(ctx, r.Key, r.Token); err != nil {
			t.Fatal(err)
		}
		r2 := req(r.Key, time.Second, true)
		f2 := mustAcquire(t, b2, r2)
		if f2 <= f1 {
			t.Fatalf("next fence %d, not above %d", f2, f1)
		}
		if _, err := b2.Release(ctx, r2.Key, r2.Token); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("FencesPerKey", func(t *testing.T) {
		pool := testserver.PgxPool(t, dsn, 2)
		b := newBackend(t, pool, pgbackend.Options{})
		ctx := ctxT(t, 10*time.Second)
		var last int64
		for i := range 20 {
			r := req("lock:fence-seq", time.Second, true)
			f := mustAcquire(t, b, r)
			if f <= last {
				t.Fatalf("grant %d: fence %d, not above %d", i, f, last)
			}
			last = f
			if _, err := b.Release(ctx, r.Key, r.Token); err != nil {
				t.Fatal(err)
			}
		}
		// The clock floor: a new key starts near the server's clock in µs.
		r := req("lock:fence-new", time.Second, true)
		f := mustAcquire(t, b, r)
		if now := time.Now().UnixMicro(); f < now-60e6 || f > now+60e6 {
			t.Errorf("first fence of a new key %d, want about the clock in µs (%d)", f, now)
		}
		if _, err := b.Release(ctx, r.Key, r.Token); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("FencingWithoutTable", func(t *testing.T) {
		ctx := ctxT(t, 20*time.Second)
		admin := testserver.PgxPool(t, dsn, 1)
		if _, err := admin.Exec(ctx, "CREATE DATABASE nofence"); err != nil {
			t.Fatal(err)
		}
		pool := testserver.PgxPool(t, strings.Replace(dsn, "/postgres?", "/nofence?", 1), 2)
		b := newBackend(t, pool, pgbackend.Options{})
		r := req("lock:nofence", 10*time.Second, true)
		_, err := b.Acquire(ctx, r)
		if err == nil || errors.Is(err, driver.ErrContended) || !strings.Contains(err.Error(), "pgbackend.Migrate") ||
			!strings.Contains(err.Error(), "lockkit_fences") || !strings.Contains(err.Error(), "lockkit_leases") {
			t.Fatalf("fencing acquire without the table: %v; want an error naming the tables and Migrate", err)
		}
		// Every acquire writes a lease record (lockkit_leases), fencing or not.
		if _, err := b.Acquire(ctx, req(r.Key, time.Second, false)); err == nil || !strings.Contains(err.Error(), "pgbackend.Migrate") {
			t.Fatalf("acquire without the tables: %v; want an error naming Migrate", err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = pgbackend.AcquireTx(ctx, tx, r.Key, time.Second, true)
		_ = tx.Rollback(ctx)
		if err == nil || !strings.Contains(err.Error(), "pgbackend.Migrate") {
			t.Fatalf("fencing AcquireTx without the table: %v", err)
		}
		if err := pgbackend.Migrate(ctx, pool); err != nil {
			t.Fatal(err)
		}
		// The failed statements left no lock behind.
		r2 := req(r.Key, time.Second, false)
		mustAcquire(t, b, r2)
		if _, err := b.Release(ctx, r2.Key, r2.Token); err != nil {
			t.Fatal(err)
		}
		if err := pgbackend.Migrate(ctx, pool); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		r3 := req(r.Key, time.Second, true)
		mustAcquire(t, b, r3)
		if _, err := b.Release(ctx, r3.Key, r3.Token); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("MutualExclusion", func(t *testing.T) { testMutualExclusion(t, dsn) })

	t.Run("TerminateBackend", func(t *testing.T) {
		pool1, pool2 := testserver.PgxPool(t, dsn, 2), testserver.PgxPool(t, dsn, 2)
		b1, b2 := newBackend(t, pool1, pgbackend.Options{}), newBackend(t, pool2, pgbackend.Options{})
		ctx := ctxT(t, 20*time.Second)
		r := req("lock:terminate", 30*time.Second, true)
		f1 := mustAcquire(t, b1, r)
		pid := holderPID(t, pool2, r.Key)
		if pid == 0 {
			t.Fatal("no session holds the lock")
		}
		var ok bool
		if err := pool2.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend: %v %v", ok, err)
		}
		// Freed on the server at once, but the lease's record keeps others
		// out until its 30s expiry (lock-delay): the holder may still count
		// it valid. An operator who frees a lock on purpose deletes the
		// record too, and then the next attempt gets it at once.
		r2 := req(r.Key, 30*time.Second, true)
		mustContend(t, b2, r2)
		if _, err := pool2.Exec(ctx, "DELETE FROM lockkit_leases WHERE id = $1", pgbackend.KeyID(r.Key)); err != nil {
			t.Fatal(err)
		}
		f2 := mustAcquire(t, b2, r2)
		if f2 <= f1 {
			t.Fatalf("fence after the terminate %d, not above %d", f2, f1)
		}
		held, err := b1.Extend(ctx, r.Key, r.Token, r.TTL)
		if held || err != nil {
			t.Fatalf("holder's Extend after pg_terminate_backend = %v, %v; want false, nil", held, err)
		}
		if held, err := b1.Release(ctx, r.Key, r.Token); held || err != nil {
			t.Fatalf("holder's Release after pg_terminate_backend = %v, %v; want false, nil", held, err)
		}
		if b1.Held() != 0 {
			t.Fatalf("Held() = %d", b1.Held())
		}
		if pid := holderPID(t, pool1, r.Key); pid == 0 {
			t.Fatal("the old holder's release freed the new holder's lock")
		}
		if held, err := b2.Release(ctx, r2.Key, r2.Token); !held || err != nil {
			t.Fatalf("new holder's Release = %v, %v", held, err)
		}
	})

	t.Run("IdleLimitFreesLock", func(t *testing.T) {
		pool1, pool2 := testserver.PgxPool(t, dsn, 2), testserver.PgxPool(t, dsn, 2)
		b1, b2 := newBackend(t, pool1, pgbackend.Options{}), newBackend(t, pool2, pgbackend.Options{})
		ctx := ctxT(t, 20*time.Second)
		const ttl = 400 * time.Millisecond
		r := req("lock:idle", ttl, false)
		start := time.Now()
		mustAcquire(t, b1, r)
		// Kept alive by Extend every ttl/4 well past the ttl.
		for time.Since(start) < 3*ttl {
			time.Sleep(ttl / 4)
			if held, err := b1.Extend(ctx, r.Key, r.Token, ttl); !held || err != nil {
				t.Fatalf("Extend %v into the hold = %v, %v", time.Since(start), held, err)
			}
		}
		// Then silent: the server ends the session about ttl after the
		// last Extend (measured from there: b2's first acquire opens a
		// session, which takes a while on a loaded machine).
		silent := time.Now()
		mustContend(t, b2, req(r.Key, ttl, false))
		_, _ = acquireWithin(t, b2, req(r.Key, ttl, false), 10*time.Second)
		took := time.Since(silent)
		if took < ttl*3/4 || took > ttl+time.Second {
			t.Fatalf("the lock went free %v after the holder fell silent; want about the ttl %v", took, ttl)
		}
		t.Logf("freed %v after the holder's last statement (ttl %v)", time.Since(silent), ttl)
		if held, err := b1.Extend(ctx, r.Key, r.Token, ttl); held || err != nil {
			t.Fatalf("holder's Extend after the idle limit = %v, %v; want false, nil", held, err)
		}
	})

	t.Run("Tx", func(t *testing.T) { testTx(t, dsn) })

	t.Run("PoolExhausted", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		// Locks share MaxHeld sessions (default: half of MaxConns 4): more
		// locks than that take no more connections.
		pool := testserver.PgxPool(t, dsn, 4)
		b := newBackend(t, pool, pgbackend.Options{ConnWait: 200 * time.Millisecond})
		for i := range 6 {
			mustAcquire(t, b, req(fmt.Sprint("lock:exhaust-", i), 10*time.Second, false))
		}
		if n := b.Sessions(); n < 1 || n > 2 {
			t.Fatalf("6 locks on a backend with MaxHeld 2 use %d sessions", n)
		}
		if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("the application's query while locks hold MaxHeld connections: %v", err)
		}

		// The application took the whole pool itself.
		pool2 := testserver.PgxPool(t, dsn, 2)
		b2 := newBackend(t, pool2, pgbackend.Options{MaxHeld: 2, ConnWait: 200 * time.Millisecond})
		var conns []interface{ Release() }
		for range 2 {
			c, err := pool2.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		start := time.Now()
		_, err := b2.Acquire(ctx, req("lock:exhaust-app", 10*time.Second, true))
		took := time.Since(start)
		if !errors.Is(err, pgbackend.ErrNoSession) || !strings.Contains(err.Error(), "pool is exhausted") || took > 2*time.Second {
			t.Fatalf("acquire on an exhausted pool: %v after %v; want ErrNoSession saying the pool is exhausted, after about 200ms", err, took)
		}
		t.Logf("pool exhausted: %v (after %v)", err, took.Round(time.Millisecond))
		for _, c := range conns {
			c.Release()
		}
		r := req("lock:exhaust-app", 10*time.Second, true)
		mustAcquire(t, b2, r)
		if _, err := b2.Release(ctx, r.Key, r.Token); err != nil {
			t.Fatal(err)
		}

		// ConnWait is honoured as set, even past ctx's deadline (the
		// Client's command timeout), and its end is ErrNoSession; ctx's
		// cancellation ends the wait at once. (A backend with no session
		// yet, on a pool the application has taken.)
		b2 = newBackend(t, pool2, pgbackend.Options{MaxHeld: 2, ConnWait: 200 * time.Millisecond})
		conns = conns[:0]
		for range 2 {
			c, err := pool2.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		defer func() {
			for _, c := range conns {
				c.Release()
			}
		}()
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = b2.Acquire(short, req("lock:exhaust-ctx", time.Second, false))
		if !errors.Is(err, pgbackend.ErrNoSession) || time.Since(start) < 150*time.Millisecond {
			t.Fatalf("acquire whose ctx deadline ends while waiting for a connection: %v after %v; want ErrNoSession after the 200ms ConnWait", err, time.Since(start))
		}
		cctx, ccancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, ccancel)
		start = time.Now()
		_, err = b2.Acquire(cctx, req("lock:exhaust-ctx", time.Second, false))
		if !errors.Is(err, context.Canceled) || errors.Is(err, pgbackend.ErrNoSession) || time.Since(start) > 150*time.Millisecond {
			t.Fatalf("acquire whose ctx is cancelled while waiting for a connection: %v after %v", err, time.Since(start))
		}
	})

	t.Run("AcquireWait", func(t *testing.T) {
		pool1, pool2 := testserver.PgxPool(t, dsn, 2), testserver.PgxPool(t, dsn, 2)
		b1, b2 := newBackend(t, pool1, pgbackend.Options{}), newBackend(t, pool2, pgbackend.Options{})
		ctx := ctxT(t, 20*time.Second)
		r := req("lock:wait", 10*time.Second, true)
		f1 := mustAcquire(t, b1, r)
		start := time.Now()
		_, _, err := b2.AcquireWait(ctx, req(r.Key, time.Second, true), 150*time.Millisecond)
		if took := time.Since(start); !errors.Is(err, driver.ErrContended) || took < 140*time.Millisecond || took > 2*time.Second {
			t.Fatalf("AcquireWait 150ms on a held key: %v after %v; want ErrContended after about 150ms", err, took)
		}
		// Released while one waits: the waiter gets it at once.
		type res struct {
			f   int64
			err error
			at  time.Time
		}
		done := make(chan res, 1)
		r2 := req(r.Key, time.Second, true)
		go func() {
			f, _, err := b2.AcquireWait(ctx, r2, 5*time.Second)
			done <- res{f, err, time.Now()}
		}()
		time.Sleep(200 * time.Millisecond)
		released := time.Now()
		if held, err := b1.Release(ctx, r.Key, r.Token); !held || err != nil {
			t.Fatalf("Release = %v, %v", held, err)
		}
		got := <-done
		if got.err != nil || got.f <= f1 {
			t.Fatalf("waiter: fence %d, %v; want a fence above %d", got.f, got.err, f1)
		}
		if d := got.at.Sub(released); d > 500*time.Millisecond {
			t.Fatalf("waiter granted %v after the release", d)
		}
		if held, err := b2.Extend(ctx, r2.Key, r2.Token, r2.TTL); !held || err != nil {
			t.Fatalf("waiter's Extend = %v, %v", held, err)
		}
		if held, err := b2.Release(ctx, r2.Key, r2.Token); !held || err != nil {
			t.Fatalf("waiter's Release = %v, %v", held, err)
		}
		// A waiter whose ctx is cancelled leaves PostgreSQL's queue too (pgx
		// sends a cancel request as it closes the connection), so it cannot
		// take the lock later for no one.
		mustAcquire(t, b1, r)
		cctx, ccancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, ccancel)
		if _, _, err := b2.AcquireWait(cctx, req(r.Key, time.Second, false), 10*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireWait cancelled while waiting: %v, want context.Canceled", err)
		}
		id := pgbackend.KeyID(r.Key)
		waiting := func() (n int) {
			err := pool1.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
				AND classid = $1::oid AND objid = $2::oid AND objsubid = 1`, uint32(uint64(id)>>32), uint32(uint64(id))).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		deadline := time.Now().Add(2 * time.Second)
		for waiting() > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the cancelled waiter still waits in PostgreSQL's queue 2s later")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := b1.Release(ctx, r.Key, r.Token); err != nil {
			t.Fatal(err)
		}
		r3 := req(r.Key, time.Second, false)
		mustAcquire(t, b1, r3)
		if _, err := b1.Release(ctx, r3.Key, r3.Token); err != nil {
			t.Fatal(err)
		}

		// A ctx shorter than maxWait ends the wait on the server first: an
		// ErrContended, not a closed connection.
		mustAcquire(t, b1, r)
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, _, err := b2.AcquireWait(short, req(r.Key, time.Second, false), 5*time.Second); !errors.Is(err, driver.ErrContended) {
			t.Fatalf("AcquireWait bounded by ctx: %v, want ErrContended", err)
		}
	})

	t.Run("AcquireWaitLinesUpInProcess", func(t *testing.T) {
		// Eight queued waiters of one key on a backend allowed one
		// connection: they line up in process, and all get the lock in turn.
		pool := testserver.PgxPool(t, dsn, 2)
		b := newBackend(t, pool, pgbackend.Options{MaxHeld: 1, ConnWait: 5 * time.Second})
		var (
			inside, grants atomic.Int64
			wg             sync.WaitGroup
			errs           = make(chan error, 32)
		)
		for range 8 {
			wg.Go(func() {
				for range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					r := req("lock:line", 5*time.Second, true)
					_, _, err := b.AcquireWait(ctx, r, 15*time.Second)
					if err != nil {
						cancel()
						errs <- err
						return
					}
					if n := inside.Add(1); n != 1 {
						errs <- fmt.Errorf("%d holders inside", n)
					}
					time.Sleep(2 * time.Millisecond)
					inside.Add(-1)
					grants.Add(1)
					if held, err := b.Release(ctx, r.Key, r.Token); !held || err != nil {
						errs <- fmt.Errorf("release: %v %v", held, err)
					}
					cancel()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if grants.Load() != 24 {
			t.Fatalf("%d grants, want 24", grants.Load())
		}
	})

	t.Run("Close", func(t *testing.T) {
		pool1, pool2 := testserver.PgxPool(t, dsn, 4), testserver.PgxPool(t, dsn, 2)
		b1 := newBackend(t, pool1, pgbackend.Options{})
		b2 := newBackend(t, pool2, pgbackend.Options{})
		ctx := ctxT(t, 10*time.Second)
		// Close ends the sessions of leases it did not release: their
		// records keep the lock from others until they expire (the
		// lockkit Client releases its leases before it closes the backend).
		r := req("lock:close", time.Second, false)
		mustAcquire(t, b1, r)
		if err := b1.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b1.Close(); err != nil {
			t.Fatal(err)
		}
		acquireWithin(t, b2, req(r.Key, time.Second, false), 5*time.Second)
		if _, err := b1.Acquire(ctx, req("lock:close-2", time.Second, false)); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("Acquire after Close: %v", err)
		}
		if got := pool1.Stat().AcquiredConns(); got != 0 {
			t.Fatalf("Close left %d connections checked out of the pool", got)
		}
	})
}

// testMutualExclusion: 4 pools, 16 goroutines on each (two backends per
// pool, 8 goroutines each), all after one key, each doing a non-atomic
// read-modify-write under the lock. A second holder would lose an update or
// see another inside.
func testMutualExclusion(t *testing.T, dsn string) {
	const (
		pools    = 4
		perPool  = 16
		duration = 2 * time.Second
		key      = "lock:mutex"
	)
	ctx := ctxT(t, 30*time.Second)
	var (
		counter, inside, grants atomic.Int64
		lastFence               atomic.Int64
		wg                      sync.WaitGroup
		fail                    = make(chan string, 1)
	)
	failf := func(format string, args ...any) {
		select {
		case fail <- fmt.Sprintf(format, args...):
		default:
		}
	}
	stop := time.Now().Add(duration)
	for p := range pools {
		pool := testserver.PgxPool(t, dsn, 8)
		bs := []*pgbackend.Backend{
			newBackend(t, pool, pgbackend.Options{MaxHeld: 4, ConnWait: 2 * time.Second}),
			newBackend(t, pool, pgbackend.Options{MaxHeld: 4, ConnWait: 2 * time.Second}),
		}
		for g := range perPool {
			b := bs[g%2]
			wg.Go(func() {
				for time.Now().Before(stop) {
					r := req(key, 5*time.Second, true)
					f, err := b.Acquire(ctx, r)
					if errors.Is(err, driver.ErrContended) {
						time.Sleep(time.Millisecond)
						continue
					}
					if err != nil {
						failf("pool %d: acquire: %v", p, err)
						return
					}
					if n := inside.Add(1); n != 1 {
						failf("%d holders inside at once", n)
					}
					if last := lastFence.Load(); f <= last {
						failf("fence %d granted after %d", f, last)
					}
					lastFence.Store(f)
					v := counter.Load() // read
					runtime.Gosched()
					time.Sleep(50 * time.Microsecond)
					counter.Store(v + 1) // write
					grants.Add(1)
					inside.Add(-1)
					if held, err := b.Release(ctx, r.Key, r.Token); !held || err != nil {
						failf("release: %v, %v", held, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case msg := <-fail:
		t.Fatal(msg)
	default:
	}
	if grants.Load() < 10 {
		t.Fatalf("only %d grants in %v", grants.Load(), duration)
	}
	if counter.Load() != grants.Load() {
		t.Fatalf("counter %d after %d grants: lost updates", counter.Load(), grants.Load())
	}
	t.Logf("%d critical sections by %d goroutines over %d pools in %v, no overlap", grants.Load(), pools*perPool, pools, duration)
}

func testTx(t *testing.T, dsn string) {
	pool1, pool2 := testserver.PgxPool(t, dsn, 2), testserver.PgxPool(t, dsn, 2)
	b2 := newBackend(t, pool2, pgbackend.Options{})
	ctx := ctxT(t, 30*time.Second)
	const key = "lock:tx"
	if _, err := pool1.Exec(ctx, "CREATE TABLE tx_work (id int PRIMARY KEY, v bigint)"); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{true, false} {
		before := storedFence(t, pool2, key)
		tx, err := pool1.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background()) // a no-op once ended; frees the connection if the test fails
		f, err := pgbackend.AcquireTx(ctx, tx, key, 5*time.Second, true)
		if err != nil || f <= before {
			t.Fatalf("AcquireTx: fence %d, %v; want one above %d", f, err, before)
		}
		var idle string
		if err := tx.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle); err != nil || idle != "10s" {
			t.Fatalf("idle_in_transaction_session_timeout in the tx = %q, %v; want 10s (TxIdleLimit: 2×TTL)", idle, err)
		}
		if f2, err := pgbackend.AcquireTx(ctx, tx, key, 5*time.Second, false); err != nil || f2 != 0 {
			t.Fatalf("AcquireTx again in the same tx (re-entrant): %d, %v", f2, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO tx_work VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", f); err != nil {
			t.Fatal(err)
		}
		mustContend(t, b2, req(key, time.Second, true)) // a session lock waits for the tx
		tx2, err := pool2.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx2.Rollback(context.Background())
		if _, err := pgbackend.AcquireTx(ctx, tx2, key, time.Second, false); !errors.Is(err, driver.ErrContended) {
			t.Fatalf("AcquireTx in another tx: %v, want ErrContended", err)
		}
		_ = tx2.Rollback(ctx)
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		r := req(key, time.Second, true)
		fs := mustAcquire(t, b2, r) // freed by the commit or the rollback
		if _, err := b2.Release(ctx, r.Key, r.Token); err != nil {
			t.Fatal(err)
		}
		var v int64
		_ = pool1.QueryRow(ctx, "SELECT coalesce((SELECT v FROM tx_work WHERE id = 1), 0)").Scan(&v)
		if commit && (v != f || fs <= f) {
			t.Fatalf("after commit: work row %d (want %d), next fence %d (want above %d)", v, f, fs, f)
		}
		if !commit && v == f {
			t.Fatalf("after rollback the work row kept %d", v)
		}
		if err := pool1.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle); err != nil || idle != "0" {
			t.Fatalf("after the tx idle_in_transaction_session_timeout = %q, %v; want 0 (local to the tx)", idle, err)
		}
	}

	// A holder that stalls inside its transaction loses the lock about ttl
	// later, and its commit fails.
	const ttl = 300 * time.Millisecond
	tx, err := pool1.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := pgbackend.AcquireTx(ctx, tx, key, ttl, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE tx_work SET v = -1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	_, took := acquireWithin(t, b2, req(key, time.Second, false), 10*time.Second)
	if took < ttl*3/4 || took > ttl+time.Second {
		t.Fatalf("stalled transaction's lock freed after %v; want about %v", took, ttl)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the stalled transaction committed after losing its session")
	}
	var v int64
	if err := pool2.QueryRow(ctx, "SELECT v FROM tx_work WHERE id = 1").Scan(&v); err != nil || v == -1 {
		t.Fatalf("work row %d, %v: the stalled transaction's write survived", v, err)
	}
}
