package lockkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestFIFOHandoverKeepsMaxHold: a FIFO lease handed over by a release
// (the handover sets the lock for min(TTL, 2s)) keeps its max hold: its
// fn's ctx ends at about start + max_hold, not seconds before.
func TestFIFOHandoverKeepsMaxHold(t *testing.T) {
	r := testserver.StartRedis(t)
	const (
		ttl     = 5 * time.Second
		maxHold = 8 * time.Second
	)
	p := Policy{TTL: ttl, MaxHold: maxHold, Wait: "fifo", Retry: Retry{MaxWait: 10 * time.Second}}
	a := lockOn(testDomain(t, newClient(t, r), p), "mh")
	b := lockOn(testDomain(t, newClient(t, r), p), "mh")

	h, err := a.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		granted, ended time.Time
		cause          error
		err            error
	}
	done := make(chan res, 1)
	sent := time.Now()
	go func() {
		var out res
		out.err = b.Do(context.Background(), func(ctx context.Context, lease *Lease) error {
			out.granted = time.Now()
			t.Logf("waiter granted %v after its call; deadline in %v", out.granted.Sub(sent), time.Until(lease.Deadline()))
			select {
			case <-ctx.Done():
				out.ended, out.cause = time.Now(), context.Cause(ctx)
			case <-time.After(2 * maxHold):
			}
			return nil
		})
		done <- out
	}()
	time.Sleep(300 * time.Millisecond) // the waiter queues behind h
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := <-done
	held := out.ended.Sub(out.granted)
	t.Logf("fn's ctx ended %v after the grant (max_hold %v): cause %v; Do: %v", held, maxHold, out.cause, out.err)
	// The lease's start is no later than the grant; it may be up to the
	// waiter's wait (~300ms) before it. Allow a second of slack.
	if out.ended.IsZero() || held < maxHold-time.Second-300*time.Millisecond {
		t.Fatalf("handed-over lease lost %v after its grant, with max_hold %v", held, maxHold)
	}
}

// queueClock is goredis.New's backend, recording when each QueueAcquire
// was called: a FIFO lease's start is no later than the last one before
// its grant (a direct grant's send, or the send whose answer placed the
// waiter the handover found).
type queueClock struct {
	driver.Backend
	q        driver.Queue
	mu       sync.Mutex
	last     time.Time
	answered chan struct{} // a token per answer, dropped when full
	// after, when set, runs on each answer before the caller gets it.
	after func(driver.QueueResult, error)
}

// wrapQueue is spec with its backend wrapped in a queueClock, set in *w
// when the Client opens it.
func wrapQueue(spec driver.Spec, w **queueClock, after func(driver.QueueResult, error)) driver.Spec {
	open := spec.Open
	spec.Open = func(cfg driver.Config) (driver.Backend, error) {
		be, err := open(cfg)
		if err != nil {
			return nil, err
		}
		*w = &queueClock{Backend: be, q: be.(driver.Queue), answered: make(chan struct{}, 1), after: after}
		return *w, nil
	}
	return spec
}

func (w *queueClock) QueueAcquire(ctx context.Context, req *driver.Request) (driver.QueueResult, error) {
	at := time.Now()
	w.mu.Lock()
	w.last = at
	w.mu.Unlock()
	r, err := w.q.QueueAcquire(ctx, req)
	if w.after != nil {
		w.after(r, err)
	}
	select {
	case w.answered <- struct{}{}:
	default:
	}
	return r, err
}

// Capabilities are the wrapped backend's, less those of the interfaces the
// wrapper hides; it keeps the queue.
func (w *queueClock) Capabilities() driver.Capabilities {
	caps := w.Backend.Capabilities()
	caps.ServerQueue, caps.Batching, caps.Routing, caps.Holders = false, false, false, false
	return caps
}

func (w *queueClock) lastCall() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *queueClock) QueueRelease(ctx context.Context, key, token, prev string) (bool, error) {
	return w.q.QueueRelease(ctx, key, token, prev)
}

func (w *queueClock) QueueSubscribe(key, token string) driver.QueueWaiter {
	return w.q.QueueSubscribe(key, token)
}

// TestFIFOHandoverExtendKeepsCap: a FIFO handover extended at once (the
// handover's 2s leave no time for the first renewal) sets the server's
// expiry no later than the lease's max hold, counted from its start. The
// extend asked for a whole TTL from its send, which with a max_hold a
// little above the TTL passed the cap by the time since the waiter's last
// send (up to a fallback interval, 200ms).
func TestFIFOHandoverExtendKeepsCap(t *testing.T) {
	r := testserver.StartRedis(t)
	const (
		ttl     = 5 * time.Second
		maxHold = ttl + 10*time.Millisecond
	)
	p := Policy{TTL: ttl, MaxHold: maxHold, Wait: "fifo", Retry: Retry{MaxWait: 10 * time.Second}}
	a := lockOn(testDomain(t, newClient(t, r), p), "mh")
	var w *queueClock
	spec := wrapQueue(goredis.New(r.Client(t)), &w, nil)
	// A command timeout of 1s: a handover's 2s leave less than that once
	// the first renewal is due, so the take extends at once.
	b := lockOn(testDomain(t, newClientOn(t, spec, WithCommandTimeout(time.Second)), p), "mh")
	raw := r.Client(t)

	h, err := a.TryAcquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		expiry, start time.Time
		err           error
	}
	done := make(chan res, 1)
	go func() {
		var out res
		out.err = b.Do(context.Background(), func(ctx context.Context, lease *Lease) error {
			out.start = w.lastCall()
			pttl, err := raw.PTTL(ctx, lease.Key()).Result()
			out.expiry = time.Now().Add(pttl)
			return err
		})
		done <- out
	}()
	// Release 150ms after one of the waiter's sends was answered: its
	// next comes a fallback interval (200ms) after it, so the handover's
	// extend is sent ~150ms after the lease's start.
	<-w.answered // the join
	<-w.answered // a refresh
	time.Sleep(150 * time.Millisecond)
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil {
		t.Fatal(out.err)
	}
	over := out.expiry.Sub(out.start.Add(maxHold))
	t.Logf("server expiry %v after the waiter's last send (max_hold %v): %v past the cap", out.expiry.Sub(out.start), maxHold, over)
	// 25ms for the extend's way to the server and PTTL's whole ms.
	if over > 25*time.Millisecond {
		t.Errorf("the handed-over lease's server expiry is %v past its max_hold %v from its start", over, maxHold)
	}
}

// lateGrants is a FIFO lock whose grants come too late to trust (their
// answers held past the TTL): the first only, or every one; grants counts
// them.
func lateGrants(t *testing.T, every bool) (lk Lock, grants *atomic.Int32) {
	r := testserver.StartRedis(t)
	const ttl = time.Second
	p := Policy{TTL: ttl, Wait: "fifo", Retry: Retry{MaxWait: 10 * time.Second}}
	var w *queueClock
	grants = new(atomic.Int32)
	spec := wrapQueue(goredis.New(r.Client(t)), &w, func(r driver.QueueResult, err error) {
		if err == nil && r.Granted && (grants.Add(1) == 1 || every) {
			time.Sleep(ttl + 200*time.Millisecond)
		}
	})
	return lockOn(testDomain(t, newClientOn(t, spec), p), "late"), grants
}

// TestFIFOGrantTooLateRejoins: a FIFO grant whose answer is taken up only
// after its TTL (a waiter paused between the answer and the grant) is given
// back and the waiter joins again, waiting on within max_wait, as after a
// handover that expired; it ended the wait with ErrUnavailable. A single
// attempt (TryAcquire) still ends there, with ErrUnavailable.
func TestFIFOGrantTooLateRejoins(t *testing.T) {
	t.Run("Do", func(t *testing.T) {
		lk, grants := lateGrants(t, false)
		ran := false
		err := lk.Do(t.Context(), func(ctx context.Context, lease *Lease) error {
			ran = true
			return nil
		})
		if err != nil || !ran {
			t.Fatalf("Do = %v (fn ran: %v) after its first grant came too late; want a grant on joining again", err, ran)
		}
		if n := grants.Load(); n != 2 {
			t.Errorf("%d grants; want 2: the late one given back, then one on joining again", n)
		}
	})
	t.Run("TryAcquireOneAttempt", func(t *testing.T) {
		lk, grants := lateGrants(t, true)
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
		defer cancel()
		l, err := lk.TryAcquire(ctx)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("TryAcquire = %v, %v; want ErrUnavailable, the late grant given back", l, err)
		}
		if n := grants.Load(); n != 1 {
			t.Errorf("TryAcquire, a single attempt, took %d grants", n)
		}
	})
}
