package lockkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// junkHead writes a queue member "junk" at the head of l's FIFO queue (join
// order 1, before any real waiter's server µs), as junk written under the
// queue keys or a member a foreign writer left: with the deadline deadline
// ("" writes none) and the :qc entry entry ("" writes none).
func junkHead(t *testing.T, rdb *redis.Client, l Lock, deadline, entry string) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.ZAdd(ctx, l.Key()+fifo.QueueSuffix, redis.Z{Score: 1, Member: "junk"}).Err(); err != nil {
		t.Fatal(err)
	}
	if deadline != "" {
		if err := rdb.Do(ctx, "ZADD", l.Key()+fifo.DeadlinesSuffix, deadline, "junk").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if entry != "" {
		if err := rdb.HSet(ctx, l.Key()+fifo.WaitersSuffix, "junk", entry).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFIFOJunkAtTheHeadIsDropped: a queue member no writer leaves behind
// stands at the head of a FIFO queue: no deadline, a deadline no waiter TTL
// reaches (inf, huge), or no :qc entry. The next script drops it like an
// expired waiter, so a Do on the free lock is granted (issue 31,
// FuzzJunkKeys: before, the member stayed the head for good and every Do
// waited out its MaxWait).
func TestFIFOJunkAtTheHeadIsDropped(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	d := fifoDomain(t, newClient(t, r), fifoPolicy(5*time.Second, 3*time.Second))
	entry := "junkch|5000|2000|0|"
	for _, c := range []struct{ name, deadline, entry string }{
		{"no deadline", "", entry},
		{"no deadline, no entry", "", ""},
		{"inf", "inf", entry},
		{"+inf", "+inf", entry},
		{"huge", "1e300", entry},
		{"maxint64", "9223372036854775807", entry},
		{"past", "-1", entry},
		{"valid deadline, no entry", "inf", ""},
		{"valid deadline, junk entry", "-1", "x"},
		{"entry without numbers", "", "junkch|a|b|c|"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := lockOn(d, c.name)
			junkHead(t, admin, l, c.deadline, c.entry)
			granted := false
			if err := l.Do(ctx, func(context.Context, *Lease) error { granted = true; return nil }); err != nil || !granted {
				t.Fatalf("Do behind a junk head: %v (granted %v)", err, granted)
			}
			if n := admin.ZCard(ctx, l.Key()+fifo.QueueSuffix).Val(); n != 0 {
				t.Fatalf("%d members left in the queue", n)
			}
		})
	}
	// A deadline that is not a number cannot be in the ZSET at all: Redis
	// refuses the score, so :qd holds numbers or is of another type (then
	// every script gets WRONGTYPE, FuzzJunkKeys' ErrUnavailable case).
	for _, bad := range []string{"abc", "", "nan"} {
		if err := admin.Do(context.Background(), "ZADD", "lock:notanumber:qd", bad, "junk").Err(); err == nil {
			t.Fatalf("ZADD with the score %q was accepted", bad)
		}
	}
}

// TestFIFOReleaseSkipsAJunkHead: a release's handover never goes to a junk
// member at the head (no deadline; with a :qc entry, the handover gave it
// the lock for min(TTL, waiter TTL); without one, nobody was told and the
// real waiter behind it stayed second for good): it is dropped, and the
// lock goes to the real waiter queued behind it.
func TestFIFOReleaseSkipsAJunkHead(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	c1, c2 := newClient(t, r), newClient(t, r)
	d1 := fifoDomain(t, c1, fifoPolicy(5*time.Second, 3*time.Second))
	d2 := fifoDomain(t, c2, fifoPolicy(5*time.Second, 3*time.Second))
	for _, c := range []struct{ name, entry string }{
		{"with entry", "junkch|5000|2000|0|"},
		{"without entry", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := lockOn(d1, "release "+c.name)
			lease, err := l.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- lockOn(d2, "release "+c.name).Do(ctx, func(context.Context, *Lease) error { return nil })
			}()
			waitQueueLen(t, admin, l, 1)
			// The junk goes in while the real waiter is queued: it is the
			// head at the release, the waiter second.
			junkHead(t, admin, l, "", c.entry)
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := admin.Get(ctx, l.Key()).Result(); err == nil && v == "junk" {
				t.Fatalf("the release handed the lock to the junk member")
			} else if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the waiter behind the junk head: %v", err)
			}
		})
	}
}
