package pgbackend_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestWaitTimeoutAfterGrant: a wait in PostgreSQL's queue (AcquireWait) is
// granted the advisory lock at once, and then waits, in the same statement,
// for a row another transaction holds: the key's lease record (the
// lock-delay read) or its fence row (the fence upsert). lock_timeout ends
// that row wait with SQLSTATE 55P03, after the lock was granted. The wait
// is not acquired (ErrContended), and the key's lock must not stay held by
// the connection it ran on: nobody holds it, and another backend takes it.
// Before, a wait on a connection new to the backend gave that connection
// back to the pool still holding the lock (an idle connection no lease
// owns), and the key stayed locked for as long as the pool kept it. The
// empty-session case (a session of the backend's with no lock left, which
// is given back with its locks dropped) held already.
func TestWaitTimeoutAfterGrant(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	for _, tc := range []struct {
		name         string
		fencing      bool
		emptySession bool
	}{
		{"RecordRowNewConnection", false, false},
		{"FenceRowNewConnection", true, false},
		{"RecordRowEmptySession", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := testserver.PgxPool(t, pg.DSN(), 4)
			b := newBackend(t, pool, pgbackend.Options{})
			key := "lock:waitrow-" + tc.name
			lockRow := "SELECT 1 FROM lockkit_leases WHERE id = $1 FOR UPDATE"
			arg := any(pgbackend.KeyID(key))
			if tc.fencing {
				if _, err := admin.Exec(ctxT(t, 5*time.Second), "INSERT INTO lockkit_fences (key, fence) VALUES ($1, 1)", key); err != nil {
					t.Fatal(err)
				}
				lockRow, arg = "SELECT 1 FROM lockkit_fences WHERE key = $1 FOR UPDATE", key
			} else if _, err := admin.Exec(ctxT(t, 5*time.Second), `INSERT INTO lockkit_leases (id, token, expires)
				VALUES ($1, 'expired', now() - interval '1 hour')`, arg); err != nil {
				t.Fatal(err) // an expired record: it delays nobody, but its row can be locked
			}
			unlockRow := testserver.HoldRow(t, admin, lockRow, arg)
			if tc.emptySession {
				// A lease taken and released leaves its session empty
				// (for a second), and the wait takes it.
				r := req("lock:waitrow-other", time.Second, false)
				mustAcquire(t, b, r)
				if held, err := b.Release(ctxT(t, 5*time.Second), r.Key, r.Token); !held || err != nil {
					t.Fatalf("release: %v, %v", held, err)
				}
			}
			start := time.Now()
			_, _, err := b.AcquireWait(ctxT(t, 10*time.Second), req(key, 10*time.Second, tc.fencing), time.Second)
			took := time.Since(start)
			pid := holderPID(t, admin, key)
			var state string
			if pid != 0 {
				_ = admin.QueryRow(ctxT(t, 5*time.Second), "SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state)
			}
			unlockRow()
			t.Logf("AcquireWait behind a locked row: %v after %v; the key's lock held then by pid %d (%q); pool: %d idle of %d",
				err, took.Round(time.Millisecond), pid, state, pool.Stat().IdleConns(), pool.Stat().TotalConns())
			if !errors.Is(err, driver.ErrContended) {
				t.Fatalf("AcquireWait = %v, want ErrContended (lock_timeout ran out)", err)
			}
			if pid != 0 {
				t.Fatalf("the wait returned not acquired, but the key's lock is held by pid %d (%q), a connection no lease owns", pid, state)
			}
			acquireWithin(t, newBackend(t, testserver.PgxPool(t, pg.DSN(), 2), pgbackend.Options{}), req(key, time.Second, false), 5*time.Second)
		})
	}
}
