package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// TestAbandonedGrantGivenBack: an acquisition whose caller gave up while
// its statement was stuck in a stopped server process leaves the key free
// once that process wakes and runs it. The process takes the lock and
// commits the lease record, then finds the connection closed and exits:
// the lock is freed, the record (lock-delay) would keep everyone out for
// the TTL, 30s, so the Client must give the token back, and go on asking
// until the outcome is known. The key must be free within 10s of the wake.
//
//   - polling: a Do whose ctx (300ms) ends while its attempt waits on a
//     stopped session; the process wakes 2s later, long after a give-back
//     that asks twice, a command timeout (500ms) apart, would have stopped.
//   - fifo: a waiter in PostgreSQL's queue, granted the lock in the server's
//     lock table while stopped, whose ctx is cancelled; the process wakes
//     at once. Before, a FIFO waiter whose ctx ended gave nothing back.
func TestAbandonedGrantGivenBack(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)

	t.Run("polling", func(t *testing.T) {
		p := lockkit.Policy{TTL: 30 * time.Second, Retry: retry}
		wc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		oc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		// Give wc a session that holds nothing (a statement on it runs
		// under the caller's ctx: pgx closes the connection when that
		// ends), and find its server process.
		var pid int
		if err := lockOf(wc, "abandon", p, "prime").TryDo(ctxT(t, 5*time.Second), func(context.Context, *lockkit.Lease) error {
			pid = holderPID(t, admin, lockOf(wc, "abandon", p, "prime").Key())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		resume := pg.PauseBackend(t, pid)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := lockOf(wc, "abandon", p, "x").Do(ctx, func(context.Context, *lockkit.Lease) error {
			return errors.New("fn ran: the attempt on a stopped session was granted")
		})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do on a stopped session = %v; want context.DeadlineExceeded", err)
		}
		time.Sleep(2 * time.Second)
		resume()
		waitFree(t, oc, lockOf(oc, "abandon", p, "x"), time.Now())
	})

	t.Run("fifo", func(t *testing.T) {
		p := fifoPolicy(30*time.Second, 20*time.Second)
		hc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		wc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		oc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		key := lockOf(hc, "abandon-fifo", p, "x").Key()
		h, err := lockOf(hc, "abandon-fifo", p, "x").TryAcquire(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- lockOf(wc, "abandon-fifo", p, "x").Do(wctx, func(context.Context, *lockkit.Lease) error {
				return errors.New("fn ran: the waiter was granted the lock before its ctx ended")
			})
		}()
		waitQueued(t, admin, key, 1)
		pid := waiterPID(t, admin, key)
		resume := pg.PauseBackend(t, pid)
		if err := h.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// The server grants the stopped waiter the lock in its lock table.
		deadline := time.Now().Add(10 * time.Second)
		for holderPID(t, admin, key) != pid {
			if time.Now().After(deadline) {
				t.Fatalf("the lock was not granted to the stopped waiter (pid %d) within 10s", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Do of the cancelled waiter = %v; want context.Canceled", err)
		}
		resume()
		waitFree(t, oc, lockOf(oc, "abandon-fifo", p, "x"), time.Now())
	})
}

// waitFree waits until l can be acquired by c, for at most 10s after woke,
// and releases it.
func waitFree(t *testing.T, c *lockkit.Client, l lockkit.Lock, woke time.Time) {
	t.Helper()
	for {
		lease, err := l.TryAcquire(ctxT(t, 5*time.Second))
		if err == nil {
			t.Logf("key free %v after the stopped process woke", time.Since(woke).Round(time.Millisecond))
			if err := lease.Release(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, lockkit.ErrNotAcquired) {
			t.Fatalf("TryAcquire after the stopped process woke: %v", err)
		}
		if time.Since(woke) > 10*time.Second {
			t.Fatalf("the key is still held %v after the stopped process woke (TTL 30s): the abandoned grant was never given back", time.Since(woke).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waiterPID is the PostgreSQL backend pid that waits for key's advisory
// lock (the first, when several do).
func waiterPID(t testing.TB, pool *pgxpool.Pool, key string) int {
	t.Helper()
	pid := lockPID(t, pool, key, false)
	if pid == 0 {
		t.Fatalf("no backend waits for %s", key)
	}
	return pid
}
