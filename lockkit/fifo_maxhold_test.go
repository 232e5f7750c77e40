package lockkit

import (
	"context"
	"testing"
	"time"

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
