package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// TestFIFOWaiterBehindTerminated: A holds a FIFO key; H, then W (each on a
// client of its own) queue in PostgreSQL. A releases and H is granted,
// writing a new lease record, while W's statement waits; then H's session is
// terminated, which frees the lock but not H's record (lock-delay, until
// H's deadline). W's wait statement reaches the head with a snapshot as old
// as its wait, so it could not see H's record: it gave the lock back and
// ended ErrNotAcquired at its max_wait, though the lock came free within it
// (an attack review: "W (max_wait 8s) was not granted"). Now W's statement
// runs again, sees the record, and W is granted once it expires: not before
// H's deadline (guarantee 1), within W's max_wait.
func TestFIFOWaiterBehindTerminated(t *testing.T) {
	pg := startPG(t)
	admin := testserver.PgxPool(t, pg.DSN(), 2)
	p := fifoPolicy(2*time.Second, 10*time.Second)
	a := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	hc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	wc := newClient(t, testserver.PgxPool(t, pg.DSN(), 2))
	key := lockOf(a, "fifoterm", p, "k").Key()

	al, err := lockOf(a, "fifoterm", p, "k").TryAcquire(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		l   *lockkit.Lease
		at  time.Time
		err error
	}
	acquire := func(c *lockkit.Client) <-chan grant {
		ch := make(chan grant, 1)
		go func() {
			l, err := lockOf(c, "fifoterm", p, "k").Acquire(ctxT(t, 30*time.Second))
			ch <- grant{l, time.Now(), err}
		}()
		return ch
	}
	hch := acquire(hc)
	waitQueued(t, admin, key, 1)
	wch := acquire(wc)
	waitQueued(t, admin, key, 2)
	if err := al.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	var h grant
	select {
	case h = <-hch:
	case <-time.After(15 * time.Second):
		t.Fatal("H was not granted within 15s of A's release")
	}
	if h.err != nil {
		t.Fatalf("H: %v", h.err)
	}
	hDeadline := h.l.Deadline()
	terminate(t, admin, holderPID(t, admin, key))
	ended := time.Now()

	var w grant
	select {
	case w = <-wch:
	case <-time.After(20 * time.Second):
		t.Fatal("W's Acquire did not return within 20s of H's termination")
	}
	if w.err != nil {
		t.Fatalf("W (max_wait 10s) was not granted (it returned %v after H's termination), though H's record expires within its TTL (2s): %v (ErrNotAcquired: %v)",
			w.at.Sub(ended).Round(time.Millisecond), w.err, errors.Is(w.err, lockkit.ErrNotAcquired))
	}
	defer func() {
		//lockkit-vet:ignore test: the release outcome is not what this test checks
		_ = w.l.Release(ctxT(t, 5*time.Second))
	}()
	select {
	case <-h.l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("H's lease was not reported lost within 5s of W's grant")
	}
	if !errors.Is(h.l.Err(), lockkit.ErrLockLost) {
		t.Errorf("H's lease ended with %v, want ErrLockLost", h.l.Err())
	}
	checkNoOverlap(t, "W behind a terminated H", h.l, hDeadline, ended, w.at)
}
