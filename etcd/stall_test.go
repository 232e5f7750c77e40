package etcd_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// stallAfterQueued is etcd.New's backend, with a hook: once armed, the first
// QueueAcquire answered "queued" stops the member (SIGSTOP) before that
// answer reaches the Client. The stall so begins between the waiter's join
// and its first Wait, which makes the watch on its predecessor.
type stallAfterQueued struct {
	driver.Backend
	q     driver.Queue
	h     driver.HolderReader
	armed atomic.Bool
	pause func()
}

func (s *stallAfterQueued) QueueAcquire(ctx context.Context, req *driver.Request) (driver.QueueResult, error) {
	r, err := s.q.QueueAcquire(ctx, req)
	if err == nil && !r.Granted && s.armed.CompareAndSwap(true, false) {
		s.pause()
	}
	return r, err
}

func (s *stallAfterQueued) QueueRelease(ctx context.Context, key, token, prev string) (bool, error) {
	return s.q.QueueRelease(ctx, key, token, prev)
}

func (s *stallAfterQueued) QueueSubscribe(key, token string) driver.QueueWaiter {
	return s.q.QueueSubscribe(key, token)
}

func (s *stallAfterQueued) ReadHolder(ctx context.Context, key string) (driver.Holding, bool, error) {
	return s.h.ReadHolder(ctx, key)
}

// stoppable stops one member (SIGSTOP) at a moment of the test's choosing
// and wakes it once, whatever comes first: the test, a timer, or cleanup.
type stoppable struct {
	t      *testing.T
	m      *testserver.EtcdMember
	mu     sync.Mutex
	paused bool
}

func newStoppable(t *testing.T, m *testserver.EtcdMember) *stoppable {
	s := &stoppable{t: t, m: m}
	t.Cleanup(s.resume)
	return s
}

func (s *stoppable) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Pause(s.t)
	s.paused = true
}

func (s *stoppable) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		s.m.Resume(s.t)
		s.paused = false
	}
}

// stopped reports whether the member is still stopped.
func (s *stoppable) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// TestFIFOWaitStalledMember: a FIFO waiter whose etcd member stalls right
// after answering its join ends at its ctx, while the member is still
// stopped (guarantee 7: every call is bounded). clientv3's Watch returns
// only once the server has answered the watch's creation; the waiter's Wait
// called it in line, under its own lock, so ctx, max_wait and Close all
// waited for the member to wake (15s, in the review that found it).
func TestFIFOWaitStalledMember(t *testing.T) {
	c := testserver.StartEtcd(t, 1)
	p := lockkit.Policy{TTL: ttl, Wait: "fifo", Retry: lockkit.Retry{MaxWait: 2 * time.Second}}
	holder, err := lockOf(newClient(t, c), "fifo", p, "x").Acquire(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		//lockkit-vet:ignore test: the holder's lease is lost to the stall; its release outcome is not what this test checks
		_ = holder.Release(ctxT(t, 10*time.Second))
	}()

	m := newStoppable(t, c.Members[0])
	w := &stallAfterQueued{pause: m.pause}
	spec := etcd.New(newCli(t, c))
	open := spec.Open
	spec.Open = func(cfg driver.Config) (driver.Backend, error) {
		be, err := open(cfg)
		if err != nil {
			return nil, err
		}
		w.Backend, w.q, w.h = be, be.(driver.Queue), be.(driver.HolderReader)
		return w, nil
	}
	cl, err := lockkit.New(spec, testOptions(t)...)
	if err != nil {
		t.Fatal(err)
	}
	// The member stays stopped for 20s at most, or until Do has returned.
	wake := time.AfterFunc(20*time.Second, m.resume)
	defer wake.Stop()

	w.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err = lockOf(cl, "fifo", p, "x").Do(ctx, func(context.Context, *lockkit.Lease) error {
		t.Error("fn ran while another client held the lock")
		return nil
	})
	took := time.Since(start)
	stillPaused := m.stopped()
	m.resume()
	t.Logf("the waiter's Do returned after %v: %v", took.Round(time.Millisecond), err)
	if w.armed.Load() {
		t.Fatal("the waiter never queued: the history did not happen")
	}
	if !stillPaused {
		t.Errorf("the waiter's Do (ctx 3s, max_wait 2s) returned only after the stopped member was woken, %v after it was called", took.Round(time.Millisecond))
	}
	if !errors.Is(err, lockkit.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do = %v; want ErrNotAcquired or the ctx's deadline", err)
	}
	//lockkit-vet:ignore test: the close outcome is not what this test checks
	_ = cl.Close(ctxT(t, 20*time.Second))
}
