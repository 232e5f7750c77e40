package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// TestFIFOMaxWaitOnPostgres: a FIFO wait on PostgreSQL behind a holder
// that never releases must give up with ErrNotAcquired after max_wait, not
// before; and one bounded by the caller's ctx deadline must end with the
// ctx's error, not ErrNotAcquired.
func TestFIFOMaxWaitOnPostgres(t *testing.T) {
	pg := startPG(t)
	holder := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	h, err := lockOf(holder, "fifo", fifoPolicy(10*time.Second, time.Minute), "x").TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = h.Release(context.Background())
	}()
	c := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))

	t.Run("MaxWait", func(t *testing.T) {
		const maxWait = 4 * time.Second
		start := time.Now()
		_, err := lockOf(c, "fifo", fifoPolicy(time.Second, maxWait), "x").Acquire(ctxT(t, 30*time.Second))
		took := time.Since(start)
		t.Logf("max_wait %v: %v after %v", maxWait, err, took)
		if !errors.Is(err, lockkit.ErrNotAcquired) || took < maxWait*95/100 {
			t.Errorf("wait with max_wait %v on a held lock ended after %v (%v); want ErrNotAcquired after max_wait, not before", maxWait, took, err)
		}
	})
	t.Run("CtxDeadline", func(t *testing.T) {
		const ctxWait = 2 * time.Second
		start := time.Now()
		_, err := lockOf(c, "fifo", fifoPolicy(time.Second, time.Minute), "x").Acquire(ctxT(t, ctxWait))
		took := time.Since(start)
		t.Logf("ctx deadline %v: %v after %v", ctxWait, err, took)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lockkit.ErrNotAcquired) {
			t.Errorf("wait bounded by a %v ctx deadline ended after %v with %v; want context.DeadlineExceeded (the ctx ended), not ErrNotAcquired", ctxWait, took, err)
		}
	})
}
