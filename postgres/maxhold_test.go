package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
)

// TestMaxHoldFreesTheKeyOnASharedSession: a holder that ignores its ctx
// still loses the key at its max hold on PostgreSQL, where a session lock
// lasts as long as its session. With one connection (WithMaxHeld(1)), the
// capped lease shares its session with another lease held for the whole
// test, whose renewals keep the session alive: before, each of them renewed
// every lock on the session, and another client got the key only when fn
// returned. Now the Client gives a lease lost at its cap (or its deadline)
// back at once, and the other client gets the key while fn still runs.
func TestMaxHoldFreesTheKeyOnASharedSession(t *testing.T) {
	pg := startPG(t)
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2), postgres.WithMaxHeld(1))
	other := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	ctx := ctxT(t, 60*time.Second)

	keep, err := lockOf(c, "keep", lockkit.Policy{TTL: 3 * time.Second}, "k").Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := keep.Release(ctx); err != nil {
			t.Errorf("the other lease on the session: %v", err)
		}
	}()

	const hold = 8 * time.Second
	capped := lockOf(c, "capped", lockkit.Policy{TTL: 2 * time.Second, MaxHold: 3 * time.Second}, "k")
	fnDone := make(chan struct{})
	leases := make(chan *lockkit.Lease, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- capped.Do(ctx, func(_ context.Context, l *lockkit.Lease) error {
			defer close(fnDone)
			leases <- l
			time.Sleep(hold) // ignores its ctx
			return nil
		})
	}()

	mine := <-leases
	theirs := lockOf(other, "capped", lockkit.Policy{TTL: 2 * time.Second}, "k")
	var got *lockkit.Lease
	for got == nil {
		select {
		case <-fnDone:
			t.Fatalf("another client never got the key while the capped fn ran (%v, max hold 3s)", hold)
		case <-time.After(20 * time.Millisecond):
		}
		l, err := theirs.TryAcquire(ctx)
		switch {
		case err == nil:
			got = l
			if mine.Valid() {
				t.Fatalf("another client got the key while the capped lease was still valid (deadline %v)", mine.Deadline())
			}
		case !errors.Is(err, lockkit.ErrNotAcquired):
			t.Fatalf("TryAcquire: %v", err)
		}
	}
	if err := got.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-doErr; !errors.Is(err, lockkit.ErrLockLost) {
		t.Fatalf("Do of a fn held past its max hold: %v; want ErrLockLost", err)
	}
	if err := keep.Err(); err != nil {
		t.Fatalf("the other lease on the session was lost: %v", err)
	}
}
