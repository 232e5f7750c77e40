package goredis

import (
	"context"
	"sync"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/redisclass"
)

// The Redis backend keeps FIFO waiting's queues (internal/fifo): one
// Notifier per go-redis client, made at the first queued waiter, closed
// with the backend.
var _ driver.Queue = (*redisBackend)(nil)

// fifoState is a redisBackend's Notifier, made once.
type fifoState struct {
	once sync.Once
	n    *fifo.Notifier
}

func (b *redisBackend) notifier() *fifo.Notifier {
	f := &b.fifo
	f.once.Do(func() {
		f.n = fifo.NewNotifier(b.rdb, fifo.NotifierOptions{Timeout: b.cmdTimeout})
	})
	return f.n
}

// QueueAcquire is one fifo.Acquire: a grant, or a place in the queue.
func (b *redisBackend) QueueAcquire(ctx context.Context, req *driver.Request) (driver.QueueResult, error) {
	r, err := fifo.Acquire(ctx, b.rdb, &fifo.Request{
		Key: req.Key, Token: req.Token, Holder: req.Holder,
		TTL: req.TTL, WaiterTTL: policy.FIFOWaiterTTL, Fencing: req.Fencing,
		Notifier: b.notifier(),
	})
	if err != nil {
		return driver.QueueResult{}, redisclass.Mark(err)
	}
	return queueResult(r), nil
}

func queueResult(r fifo.Result) driver.QueueResult {
	return driver.QueueResult{
		Granted: r.Granted, Fence: r.Fence, Previous: r.Previous, Earlier: r.Earlier,
		Position: r.Position, LockTTL: r.LockTTL, Fallback: r.Fallback(policy.FIFOFallback), Joined: r.Joined,
	}
}

// QueueRelease is fifo.Release: release, and hand over to the next waiter.
func (b *redisBackend) QueueRelease(ctx context.Context, key, token, prev string) (bool, error) {
	held, err := fifo.Release(ctx, b.rdb, key, token, prev)
	return held, redisclass.Mark(err)
}

// QueueSubscribe registers token with the client's Notifier.
func (b *redisBackend) QueueSubscribe(key, token string) driver.QueueWaiter {
	return fifoWaiter{b.notifier().Subscribe(key, token)}
}

type fifoWaiter struct{ w *fifo.Waiter }

func (w fifoWaiter) Wait(ctx context.Context, fallback time.Duration) (string, error) {
	k, err := w.w.Wait(ctx, fallback)
	return k.String(), err
}

func (w fifoWaiter) Granted() (driver.QueueResult, bool) {
	r, ok := w.w.Granted()
	if !ok {
		return driver.QueueResult{}, false
	}
	return queueResult(r), true
}

func (w fifoWaiter) Close() { w.w.Close() }

// closeNotifier closes the Notifier (made now if none was: that starts
// nothing). Waiters registered afterwards are woken by their timers alone.
func (b *redisBackend) closeNotifier() { _ = b.notifier().Close() }
