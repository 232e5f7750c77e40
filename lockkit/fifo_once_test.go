package lockkit

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// A FIFO script is sent at most once (guarantee 7): when the connection
// drops after the FIFO acquire (or release) reached the server, go-redis
// does not send it again behind lockkit's back. The client is configured
// as the README shows (go-redis default retries). Before the FIFO scripts
// went through the send-at-most-once path, go-redis re-sent both: the
// acquire reached the server twice and TryAcquire returned a lease from the
// replay (it found its own grant), and the re-sent release found the lock
// gone and reported a loss.
func TestFIFOScriptsSentAtMostOnce(t *testing.T) {
	r := testserver.StartRedis(t)
	p := testserver.StartDropProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := newClientOver(t, rdb)
	d := fifoDomain(t, c, fifoPolicy(10*time.Second, 5*time.Second))
	l := lockOn(d, "k")
	direct := r.Client(t)
	ctx := t.Context()
	// Warm up: the scripts are loaded (no NOSCRIPT later) and a connection
	// is open.
	if err := l.TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	key := []byte(l.Key() + fifo.WaitersSuffix)
	wake := []byte(fifo.ChannelSuffix)
	isAcquire := func(b []byte) bool { return bytes.Contains(b, key) && bytes.Contains(b, wake) }
	isRelease := func(b []byte) bool { return bytes.Contains(b, key) && !bytes.Contains(b, wake) }

	t.Run("acquire", func(t *testing.T) {
		p.Arm(isAcquire)
		lease, err := l.TryAcquire(ctx)
		sent := p.Seen()
		t.Logf("TryAcquire with its connection dropped after the script ran: %v; acquire scripts that reached the server: %d", err, sent)
		if err == nil {
			_ = lease.Release(ctx)
			t.Fatalf("TryAcquire returned a lease from a re-sent acquire (%d acquire scripts reached the server), want ErrUnavailable", sent)
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("TryAcquire = %v, want ErrUnavailable", err)
		}
		if sent != 1 {
			t.Errorf("%d acquire scripts reached the server, want 1", sent)
		}
		// The key the lost reply granted is given back (fail leaves the
		// queue, which releases a grant), at once: no TTL to wait for.
		pollFor(t, 5*time.Second, "the key given back", func() bool {
			return direct.Exists(ctx, l.Key(), l.Key()+fifo.QueueSuffix).Val() == 0
		})
		other := newClient(t, r)
		if err := lockOn(fifoDomain(t, other, fifoPolicy(10*time.Second, 5*time.Second)), "k").TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
			t.Errorf("another client after the give-back: %v, want the lock", err)
		}
	})

	t.Run("release", func(t *testing.T) {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Arm(isRelease)
		err = lease.Release(ctx)
		sent := p.Seen()
		t.Logf("Release with its connection dropped after the script ran: %v; release scripts that reached the server: %d", err, sent)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
			t.Errorf("Release = %v, want ErrUnavailable (not a loss: the lease held the lock until it released it)", err)
		}
		if sent != 1 {
			t.Errorf("%d release scripts reached the server, want 1", sent)
		}
		if n := direct.Exists(ctx, l.Key()).Val(); n != 0 {
			t.Errorf("the released key still exists")
		}
	})
}
