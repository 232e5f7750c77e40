package pgbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestAbandonedGrantGivenBack: an acquire whose caller gave up (its ctx
// ended) while the statement was on its way to a stalled server backend is
// run by that backend afterwards: it takes the lock and commits the lease
// record, then finds the connection pgx closed and exits, which frees the
// lock but not the record. The record keeps every other holder out until
// its expiry (lock-delay), 30s here, though no client holds its token. The
// Client gives such a token back (Release, repeated: lockkit's giveBack):
// while that server process lives, Release must say the outcome is not
// known yet (an error, so the give-back asks again: the process may run
// the statement seconds later); once it has ended, Release must remove the
// record, so the key is free at once. Before,
// Release of a token the backend held no lease for returned without asking
// the server, and the key stayed refused for the whole TTL (drivertest's
// CtxCancelled failed so in round 18's R4 and R7).
func TestAbandonedGrantGivenBack(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 1)
	for _, fencing := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "fencing"}[fencing]
		t.Run(name, func(t *testing.T) {
			w := newBackend(t, testserver.PgxPool(t, pg.DSN(), 1), pgbackend.Options{MaxHeld: 1})
			other := newBackend(t, testserver.PgxPool(t, pg.DSN(), 1), pgbackend.Options{})

			// Give w a session that holds nothing (a statement on it runs
			// under the caller's ctx, and pgx closes the connection when
			// that ends), and find its server backend. The primer takes the
			// same statement, so pgx has it prepared and sends it whole.
			prime := req("abandon:prime:"+name, 30*time.Second, fencing)
			mustAcquire(t, w, prime)
			pid := holderPID(t, admin, prime.Key)
			if pid == 0 {
				t.Fatal("no backend holds the primed lock")
			}
			if held, err := w.Release(ctxT(t, 5*time.Second), prime.Key, prime.Token); err != nil || !held {
				t.Fatalf("release the primed lock = %v, %v; want true, nil", held, err)
			}

			resume := pg.PauseBackend(t, pid)
			r := req("abandon:"+name, 30*time.Second, fencing)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err := w.Acquire(ctx, r)
			cancel()
			if err == nil {
				t.Fatal("acquire on a stopped backend succeeded")
			}
			t.Logf("acquire on a stopped backend: %v", err)
			// While the server process that may still run the statement
			// lives, its outcome is unknown: a give-back must not count
			// as done (the Client's asks again until it is).
			if held, err := w.Release(ctxT(t, 5*time.Second), r.Key, r.Token); err == nil || held {
				t.Fatalf("Release while the abandoned statement's server process is stopped = %v, %v; want an error (outcome unknown)", held, err)
			} else {
				t.Logf("Release while it is stopped: %v", err)
			}
			resume()
			waitBackendGone(t, admin, pid)

			var n int
			if err := admin.QueryRow(ctxT(t, 5*time.Second), "SELECT count(*) FROM lockkit_leases WHERE id = $1 AND token = $2",
				pgbackend.KeyID(r.Key), r.Token).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d lease records of the abandoned acquire, want 1: the stopped backend did not run it after its client left (the history this test needs)", n)
			}
			mustContend(t, other, req(r.Key, 30*time.Second, false)) // the record keeps others out

			// The token held no lock here: held is false, and the record
			// is gone.
			held, err := w.Release(ctxT(t, 5*time.Second), r.Key, r.Token)
			if err != nil || held {
				t.Fatalf("Release of the abandoned token = %v, %v; want false, nil", held, err)
			}
			mustAcquire(t, other, req(r.Key, 30*time.Second, false))
			// A second give-back (the Client repeats it) touches nothing:
			// the key is other's now.
			if held, err := w.Release(ctxT(t, 5*time.Second), r.Key, r.Token); err != nil || held {
				t.Fatalf("second Release of the abandoned token = %v, %v; want false, nil", held, err)
			}
			mustContend(t, w, req(r.Key, 30*time.Second, false))
		})
	}
}

// waitBackendGone waits until the server lists no session with pid: the
// backend has exited, and its locks are free.
func waitBackendGone(t *testing.T, admin *pgxpool.Pool, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := admin.QueryRow(ctxT(t, 5*time.Second), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still listed 10s after its client closed the connection", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
