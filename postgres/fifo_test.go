package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// fifoPolicy is a FIFO domain's policy: waits in PostgreSQL's own queue,
// for at most maxWait.
func fifoPolicy(ttl, maxWait time.Duration) lockkit.Policy {
	return lockkit.Policy{TTL: ttl, Wait: "fifo", Retry: lockkit.Retry{Attempts: 2, MaxWait: maxWait}}
}

// queued is how many sessions wait in PostgreSQL's queue for key's lock.
func queued(t *testing.T, admin *pgxpool.Pool, key string) int {
	t.Helper()
	id := postgres.KeyID(key)
	var n int
	err := admin.QueryRow(ctxT(t, 5*time.Second), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1 AND classid = $1::oid AND objid = $2::oid`,
		uint32(uint64(id)>>32), uint32(uint64(id))).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueued waits (bounded) until n sessions wait for key's lock.
func waitQueued(t *testing.T, admin *pgxpool.Pool, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for queued(t, admin, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for %s; want %d", queued(t, admin, key), key, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFIFOOnPostgres: a FIFO domain on PostgreSQL waits in PostgreSQL's own
// lock queue. 16 waiters (16 clients, as 16 processes) that arrive one after
// another while the lock is held are granted in arrival order; a waiter
// granted after waiting longer than its TTL still holds a valid lease (its
// TTL counts from the grant as the server measured it, not from the send);
// max_wait ends a wait with ErrNotAcquired and leaves the queue; a cancelled
// ctx and Close end a wait at once and leave the queue.
func TestFIFOOnPostgres(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	holder := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	key := lockOf(holder, "fifo", fifoPolicy(time.Second, time.Second), "x").Key()

	t.Run("ArrivalOrder", func(t *testing.T) {
		const n = 16
		p := fifoPolicy(5*time.Second, time.Minute)
		h, err := lockOf(holder, "fifo", p, "x").TryAcquire(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
			errs  = make([]error, n)
		)
		for i := range n {
			c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
			wg.Go(func() {
				errs[i] = lockOf(c, "fifo", p, "x").Do(ctxT(t, time.Minute), func(context.Context, *lockkit.Lease) error {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					return nil
				})
			})
			waitQueued(t, admin, key, i+1) // i+1 waiters, in this order
		}
		if err := h.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		}
		if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; !slices.Equal(order, want) {
			t.Fatalf("grant order %v; want arrival order %v", order, want)
		}
	})

	t.Run("LongWaitKeepsItsTTL", func(t *testing.T) {
		// The waiter's TTL (1s) is shorter than its wait (1.5s): counted
		// from the send, the grant would come too late to trust.
		h, err := lockOf(holder, "fifo", fifoPolicy(5*time.Second, time.Minute), "x").TryAcquire(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		// The subtests that follow take x through holder: its release
		// must have ended on holder's side too, not only on the server
		// (which already granted c), or holder answers "held" itself.
		released := make(chan error, 1)
		time.AfterFunc(1500*time.Millisecond, func() { released <- h.Release(context.Background()) })
		defer func() {
			if err := <-released; err != nil {
				t.Logf("the holder's release: %v", err)
			}
		}()
		start := time.Now()
		l, err := lockOf(c, "fifo", fifoPolicy(time.Second, time.Minute), "x").Acquire(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("waiter granted after %v: %v", time.Since(start), err)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("lease granted after a %v wait: Err() = %v", time.Since(start), err)
		}
		if rest := time.Until(l.Deadline()); rest < 500*time.Millisecond {
			t.Fatalf("lease granted after a %v wait has %v left of its 1s TTL", time.Since(start), rest)
		}
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LineInProcessKeepsItsTTL", func(t *testing.T) {
		// The holder is on the waiter's own client, taken by a FIFO
		// Acquire: the waiter waits in process, behind the holder's gate,
		// before its statement is sent. That wait is not spent lease
		// either: counted from before it (the Client's send), a 0.7 s line
		// left the 1 s lease about 0.25 s.
		c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		lk := lockOf(c, "fifo", fifoPolicy(time.Second, time.Minute), "inline")
		h, err := lk.Acquire(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan error, 1)
		time.AfterFunc(700*time.Millisecond, func() { released <- h.Release(context.Background()) })
		start := time.Now()
		l, err := lk.Acquire(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatalf("waiter granted after %v: %v", time.Since(start), err)
		}
		if err := <-released; err != nil {
			t.Fatalf("the holder's release: %v", err)
		}
		if rest := time.Until(l.Deadline()); rest < 500*time.Millisecond {
			t.Fatalf("lease granted after a %v wait in process has %v left of its 1s TTL", time.Since(start), rest)
		}
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("MaxWait", func(t *testing.T) {
		h, err := lockOf(holder, "fifo", fifoPolicy(5*time.Second, time.Minute), "x").TryAcquire(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		defer func() { _ = h.Release(context.Background()) }()
		c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
		const maxWait = 300 * time.Millisecond
		start := time.Now()
		_, err = lockOf(c, "fifo", fifoPolicy(time.Second, maxWait), "x").Acquire(ctxT(t, 30*time.Second))
		took := time.Since(start)
		if !errors.Is(err, lockkit.ErrNotAcquired) || took < maxWait*9/10 || took > maxWait+5*time.Second {
			t.Fatalf("wait with max_wait %v on a held lock: %v after %v; want ErrNotAcquired after about max_wait", maxWait, err, took)
		}
		waitQueued(t, admin, key, 0)
	})

	for _, how := range []string{"ctx", "Close"} {
		t.Run("LeaveOn"+how, func(t *testing.T) {
			h, err := lockOf(holder, "fifo", fifoPolicy(5*time.Second, time.Minute), "x").TryAcquire(ctxT(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			//lockkit-vet:ignore test: the release outcome is not what this test checks
			defer func() { _ = h.Release(context.Background()) }()
			c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
			ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
			defer cancel()
			done := make(chan error, 1)
			go func() {
				//lockkit-vet:ignore test: the release outcome is not what this test checks
				_, err := lockOf(c, "fifo", fifoPolicy(5*time.Second, time.Minute), "x").Acquire(ctx)
				done <- err
			}()
			waitQueued(t, admin, key, 1)
			start := time.Now()
			if how == "ctx" {
				cancel()
			} else {
				go func() { _ = c.Close(ctxT(t, 5*time.Second)) }()
			}
			err = <-done
			took := time.Since(start)
			want := error(context.Canceled)
			if how == "Close" {
				want = lockkit.ErrClosed
			}
			if !errors.Is(err, want) || took > 5*time.Second {
				t.Fatalf("waiter ended by %s: %v after %v; want %v at once", how, err, took, want)
			}
			waitQueued(t, admin, key, 0)
		})
	}
}
