package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// TestFIFOAbandonedGrantGivenBack: a FIFO waiter whose ctx ends just as
// PostgreSQL grants it the lock (its backend was granted the lock in the
// server's lock table while stopped, and runs the rest of the grant when it
// wakes, after its client closed the connection) leaves the key free: the
// Client gives back a request whose outcome it cannot know, whatever ended
// it. The TTL is 30s; the key must be free within 10s.
func TestFIFOAbandonedGrantGivenBack(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	p := fifoPolicy(30*time.Second, 20*time.Second)
	hc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	wc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	oc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	key := lockOf(hc, "abandon", p, "x").Key()

	h, err := lockOf(hc, "abandon", p, "x").TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- lockOf(wc, "abandon", p, "x").Do(wctx, func(context.Context, *lockkit.Lease) error {
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
	gaveUp := time.Now()

	for {
		l, err := lockOf(oc, "abandon", p, "x").TryAcquire(ctxT(t, 5*time.Second))
		if err == nil {
			t.Logf("key free %v after the waiter gave up", time.Since(gaveUp).Round(time.Millisecond))
			if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, lockkit.ErrNotAcquired) {
			t.Fatalf("TryAcquire after the waiter gave up: %v", err)
		}
		if time.Since(gaveUp) > 10*time.Second {
			t.Fatalf("the key is still held %v after the waiter gave up (TTL 30s): the abandoned grant was never given back", time.Since(gaveUp).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waiterPID is the PostgreSQL backend pid that waits for key's advisory
// lock (the first, when several do).
func waiterPID(t testing.TB, pool *pgxpool.Pool, key string) int {
	t.Helper()
	id := postgres.KeyID(key)
	var pid int
	err := pool.QueryRow(ctxT(t, 5*time.Second), `SELECT coalesce((SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
		AND classid = $1::oid AND objid = $2::oid LIMIT 1), 0)`,
		uint32(uint64(id)>>32), uint32(uint64(id))).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	if pid == 0 {
		t.Fatalf("no backend waits for %s", key)
	}
	return pid
}
