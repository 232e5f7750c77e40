package fifo_test

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/redis/go-redis/v9"
)

// The acquire loop a Client runs for a FIFO domain. The Notifier is the
// Client's, one per go-redis client; the rest is per acquisition.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	n := fifo.NewNotifier(rdb, fifo.NotifierOptions{})
	defer n.Close()

	ctx := context.Background()
	key := "lock:{table:42}"
	req := &fifo.Request{
		Key:       key,
		Token:     rand.Text(),
		TTL:       10 * time.Second,
		WaiterTTL: 3 * time.Second,
		Fencing:   true,
		Wake:      n.Channel(key),
	}
	leave := func() {
		// On a ctx of its own: a cancelled caller must still leave.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = fifo.Leave(lctx, rdb, key, req.Token)
	}
	var w *fifo.Waiter
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for {
		// The lease's local deadline starts here, before the send (for a
		// grant by handover too: it happens after this send).
		r, err := fifo.Acquire(ctx, rdb, req)
		if err != nil {
			leave() // ErrUnavailable; the grant may have happened
			return
		}
		if r.Granted {
			// r.Earlier: handed over before this call (its push was
			// lost): count the lease from the previous send instead.
			// Hold the lock with fence r.Fence; link the acquire span to
			// r.Previous. Release with this hold's trace context:
			_, _ = fifo.Release(ctx, rdb, key, req.Token, "00-…-01")
			return
		}
		// Record r.Position. Out of attempts or past MaxWait: leave().
		if w == nil {
			w = n.Subscribe(key, req.Token)
		}
		wake, err := w.Wait(ctx, r.Fallback(250*time.Millisecond))
		if err != nil {
			leave() // the caller's ctx ended
			return
		}
		_ = wake // record: push, timer or subscribed
		if g, ok := w.Granted(); ok {
			// Handed over by the release: held since before the push. The
			// lease counts from the send of the last Acquire above, and
			// g.LockTTL is min(TTL, WaiterTTL): extend at once.
			_ = g.Fence
			_, _ = fifo.Release(ctx, rdb, key, req.Token, "00-…-01")
			return
		}
	}
}
