package lockkit

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// Every lock command of a polling domain is sent at most once (guarantee 7,
// issue 35): when the connection drops after the acquire, release or extend
// reached the server and ran, go-redis does not send it again behind
// lockkit's back. The client is the README's (go-redis's default retries,
// ContextTimeoutEnabled). A replay would answer for the first send:
//   - a re-sent acquire finds the key held by its own token, which reads as
//     contention (ErrNotAcquired) while a lease nobody owns holds the key;
//   - a re-sent release finds the key gone, which reads as a loss;
//   - a re-sent extend answers for a send the caller already counted.
//
// TestFIFOScriptsSentAtMostOnce is the same history for FIFO domains.
func TestScriptsSentAtMostOnce(t *testing.T) {
	scriptsSentAtMostOnce(t, func(rdb *redis.Client) driver.Spec { return goredis.New(rdb) })
}

// The same with the commands on go-redis's autopipeliner, which sends them
// in batches.
func TestScriptsSentAtMostOnceAutoPipelined(t *testing.T) {
	scriptsSentAtMostOnce(t, autopipeline.New)
}

func scriptsSentAtMostOnce(t *testing.T, spec func(*redis.Client) driver.Spec) {
	r := testserver.StartRedis(t)
	p := testserver.StartDropProxy(t, r.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := newClientOn(t, spec(rdb))
	direct := r.Client(t)
	ctx := t.Context()

	for _, fencing := range []bool{false, true} {
		name := "plain"
		if fencing {
			name = "fencing"
		}
		d := testDomain(t, c, Policy{TTL: 10 * time.Second, Renew: -1, Fencing: fencing})
		l := lockOn(d, name)
		key := []byte(l.Key())
		// Warm up: scripts loaded (no NOSCRIPT later), a connection open.
		if err := l.TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
		// What each command carries on the wire besides the key: the plain
		// acquire is SET … NX, the fencing acquire a script naming the
		// fence counter; release and extend are scripts whose arguments
		// end with the token (release) or the TTL in ms (extend).
		isAcquire := func(b []byte) bool {
			if !bytes.Contains(b, key) {
				return false
			}
			if fencing {
				return bytes.Contains(b, []byte(fenceSuffix))
			}
			// NX as an argument of its own (a RESP bulk string of 2
			// bytes): a release's token, 26 base32 letters, holds "NX"
			// once in about 40 runs, and a bare "nx" match took that
			// release for an acquire and never dropped it.
			return bytes.Contains(bytes.ToLower(b), []byte("$2\r\nnx\r\n"))
		}
		isExtend := func(b []byte) bool { return bytes.Contains(b, key) && bytes.Contains(b, []byte("\r\n10000\r\n")) }
		isRelease := func(b []byte) bool {
			return bytes.Contains(b, key) && !isAcquire(b) && !isExtend(b)
		}

		t.Run(name+"/acquire", func(t *testing.T) {
			p.Arm(isAcquire)
			lease, err := l.TryAcquire(ctx)
			sent := p.Seen()
			t.Logf("TryAcquire with its connection dropped after the command ran: %v; acquires that reached the server: %d", err, sent)
			if err == nil {
				_ = lease.Release(ctx)
				t.Fatalf("TryAcquire returned a lease (%d acquires reached the server), want ErrUnavailable: its reply was lost", sent)
			}
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotAcquired) {
				t.Fatalf("TryAcquire = %v, want ErrUnavailable and not contention", err)
			}
			if sent != 1 {
				t.Errorf("%d acquires reached the server, want 1", sent)
			}
			// The key the lost reply granted is given back: nobody owns it.
			pollFor(t, 5*time.Second, "the key given back", func() bool { return direct.Exists(ctx, l.Key()).Val() == 0 })
			if err := l.TryDo(ctx, func(context.Context, *Lease) error { return nil }); err != nil {
				t.Errorf("the next TryDo after the give-back: %v, want the lock", err)
			}
		})

		t.Run(name+"/release", func(t *testing.T) {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p.Arm(isRelease)
			err = lease.Release(ctx)
			sent := p.Seen()
			t.Logf("Release with its connection dropped after the script ran: %v; releases that reached the server: %d", err, sent)
			if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
				t.Errorf("Release = %v, a loss: the lease held the lock until it released it", err)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("Release = %v, want ErrUnavailable (its outcome is unknown to the caller)", err)
			}
			if sent != 1 {
				t.Errorf("%d releases reached the server, want 1", sent)
			}
			if n := direct.Exists(ctx, l.Key()).Val(); n != 0 {
				t.Errorf("the released key still exists")
			}
		})

		t.Run(name+"/extend", func(t *testing.T) {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lease.Release(ctx) }()
			before := lease.Deadline()
			p.Arm(isExtend)
			err = lease.Extend(ctx)
			sent := p.Seen()
			t.Logf("Extend with its connection dropped after the script ran: %v; extends that reached the server: %d", err, sent)
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLockLost) {
				t.Errorf("Extend = %v, want ErrUnavailable: its reply was lost, the lease is not lost", err)
			}
			if sent != 1 {
				t.Errorf("%d extends reached the server, want 1", sent)
			}
			// Judged by the deadline rules: the unanswered extend does not
			// move the deadline, and the lease stays valid until then.
			if got := lease.Deadline(); !got.Equal(before) {
				t.Errorf("deadline moved from %v to %v on an extend whose reply was lost", before, got)
			}
			if err := lease.Err(); err != nil {
				t.Errorf("lease.Err() = %v after an unanswered extend, want nil (valid until %v)", err, before)
			}
			if err := lease.Extend(ctx); err != nil {
				t.Errorf("the next Extend = %v, want nil", err)
			}
			if !lease.Deadline().After(before) {
				t.Errorf("an answered extend did not move the deadline")
			}
		})
	}
}
