package zookeeper

import (
	"context"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
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
// as the token's last QueueAcquire found it. The watch is set in the
// background, from Wait.
func (b *backend) QueueSubscribe(key, token string) driver.QueueWaiter {
	return &waiter{b: b, key: key, token: token, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// waiter is a token's registration for wake-ups. It holds no acquisition:
// each Wait looks the token's up again, since the one it had at the
// subscription may be gone (granted, then released or given up, while the
// token queues again as a new acquisition, with a new node).
type waiter struct {
	b          *backend
	key, token string
	wake       chan struct{}
	done       chan struct{}

	mu       sync.Mutex
	watching string        // the predecessor a live watch covers, "" when none
	stop     chan struct{} // closed when that watch is superseded
	closed   bool
}

// Wait returns on the predecessor's deletion (or any change of it, or the
// loss of the watch with its connection or session), on fallback, or when
// ctx ends. It sets a watch on the token's predecessor, as the last attempt
// found it, whenever no live watch covers that one: a watch ends when it
// fires and when its GetW fails (a connection dropped under it: the next
// attempt finds the same predecessor, which is watched again).
func (w *waiter) Wait(ctx context.Context, fallback time.Duration) (string, error) {
	select {
	case <-w.wake: // a watch that ended since the last Wait
		return "push", nil
	default:
	}
	var (
		pred string
		conn *zk.Conn
	)
	if a := w.b.lookup(w.key, w.token, false); a != nil {
		a.mu.Lock()
		pred = a.pred
		a.mu.Unlock()
		conn = a.s.conn
	}
	w.mu.Lock()
	if pred != "" && pred != w.watching && !w.closed {
		if w.stop != nil {
			close(w.stop) // the watch of an earlier predecessor wakes no one
		}
		stop := make(chan struct{})
		w.watching, w.stop = pred, stop
		go w.watch(conn, pred, stop)
	}
	w.mu.Unlock()
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

// watch waits for pred's change on conn, then wakes the waiter: it is no
// longer watched (unless a later watch superseded this one meanwhile, or
// the waiter closed).
func (w *waiter) watch(conn *zk.Conn, pred string, stop chan struct{}) {
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
		case <-stop:
			return
		}
	}
	w.mu.Lock()
	current := w.stop == stop
	if current {
		w.watching, w.stop = "", nil
	}
	w.mu.Unlock()
	if !current {
		return
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
