package zookeeper

import (
	"context"
	"sync"
	"time"

	"github.com/lockkit/lockkit/driver"
)

// QueueAcquire is one attempt of a FIFO wait: the token's node is created
// the first time (and kept between attempts: it is the token's place in the
// queue), and the lock is granted when the node is the lowest. The node's
// session keeps it: LockTTL is the TTL, from this call's send.
func (b *backend) QueueAcquire(ctx context.Context, req *driver.Request) (driver.QueueResult, error) {
	a, err := b.acquisition(req)
	if err != nil {
		return driver.QueueResult{}, classify(err)
	}
	sent := time.Now()
	pos, _, err := b.attempt(ctx, a, req)
	if err != nil {
		return driver.QueueResult{}, classify(err)
	}
	if pos == 0 {
		a.mu.Lock()
		a.granted = true
		a.mu.Unlock()
		if !b.keepUntil(a, sent.Add(req.TTL)) {
			return driver.QueueResult{}, givenUp(req.Key)
		}
		r := driver.QueueResult{Granted: true, LockTTL: req.TTL}
		if req.Fencing {
			a.mu.Lock()
			r.Fence = a.czxid
			a.mu.Unlock()
		}
		return r, nil
	}
	// The watch on the predecessor wakes the waiter; the fallback only
	// covers a watch lost with its session. A waiter that stops asking
	// (for two fallbacks) loses its place.
	if !b.keepUntil(a, sent.Add(2*req.TTL+b.cmdTimeout)) {
		return driver.QueueResult{}, givenUp(req.Key)
	}
	return driver.QueueResult{Position: pos, LockTTL: req.TTL, Fallback: req.TTL}, nil
}

// QueueRelease deletes the token's node: a holder's release, which wakes
// the next waiter (its watch on this node fires), or a waiter leaving.
func (b *backend) QueueRelease(ctx context.Context, key, token, _ string) (bool, error) {
	return b.Release(ctx, key, token)
}

// QueueSubscribe returns a waiter that watches the token's predecessor,
// as the last QueueAcquire found it. The watch is set in the background.
func (b *backend) QueueSubscribe(key, token string) driver.QueueWaiter {
	w := &waiter{a: b.lookup(key, token, false), wake: make(chan struct{}, 1), done: make(chan struct{})}
	return w
}

type waiter struct {
	a    *acq
	wake chan struct{}
	done chan struct{}

	mu       sync.Mutex
	watching string
	closed   bool
}

// Wait returns on the predecessor's deletion (or any change of it, or the
// loss of the watch with its session), on fallback, or when ctx ends.
func (w *waiter) Wait(ctx context.Context, fallback time.Duration) (string, error) {
	if w.a != nil {
		w.a.mu.Lock()
		pred := w.a.pred
		w.a.mu.Unlock()
		w.mu.Lock()
		if pred != "" && pred != w.watching && !w.closed {
			w.watching = pred
			go w.watch(pred)
		}
		w.mu.Unlock()
	}
	t := time.NewTimer(fallback)
	defer t.Stop()
	select {
	case <-w.wake:
		return "push", nil
	case <-t.C:
		return "timer", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (w *waiter) watch(pred string) {
	conn := w.a.s.conn
	// GetW, not ExistsW: on a node already gone, ExistsW leaves a watch for
	// its creation, and a sequential name is never created again, so each
	// handover that deleted the predecessor first would leave one on the
	// server (and in go-zookeeper's list) for the session's life. GetW sets
	// its watch only on a node that exists.
	_, _, ch, err := conn.GetW(pred)
	if err == nil {
		select {
		case <-ch:
		case <-w.done:
			return
		}
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Granted: a grant never comes with the push; the next attempt finds it.
func (w *waiter) Granted() (driver.QueueResult, bool) { return driver.QueueResult{}, false }

func (w *waiter) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.done)
	}
}
