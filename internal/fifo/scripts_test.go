package fifo

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A holder's release takes it out of the queue too when it is queued after
// all (junk: no script leaves a holder queued), so the lock is never handed
// back to the token that gave it up; a holder that is not queued leaves the
// other waiters' entries alone.
func TestReleaseOfAQueuedHolder(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	key := "lock:{queuedholder}"
	holder, waiter := newToken(), newToken()
	if r, err := acq(ctx, rdb, key, holder, 10*time.Second, false, 2*time.Second, ""); err != nil || !r.Granted {
		t.Fatal(r, err)
	}
	if r, err := acq(ctx, rdb, key, waiter, 10*time.Second, false, 2*time.Second, "lock:{queuedholder}:w:0123456789abcdef"); err != nil || r.Granted {
		t.Fatal(r, err)
	}
	// The holder written at the head, as a live waiter.
	now := time.Now().UnixMilli()
	rdb.ZAdd(ctx, key+QueueSuffix, redis.Z{Score: 1, Member: holder})
	rdb.ZAdd(ctx, key+DeadlinesSuffix, redis.Z{Score: float64(now + 2000), Member: holder})
	rdb.HSet(ctx, key+WaitersSuffix, holder, "lock:{queuedholder}:w:0123456789abcdef|10000|2000|0|")
	if held, err := Release(ctx, rdb, key, holder, ""); err != nil || !held {
		t.Fatal(held, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != waiter {
		t.Fatalf("after the release the lock holds %q, want the waiter (not the holder again)", v)
	}
	for _, k := range []string{key + QueueSuffix, key + DeadlinesSuffix} {
		if err := rdb.ZScore(ctx, k, holder).Err(); err != redis.Nil {
			t.Fatalf("the released holder is still in %s (%v)", k, err)
		}
	}
	if err := rdb.HGet(ctx, key+WaitersSuffix, holder).Err(); err != redis.Nil {
		t.Fatalf("the released holder's waiter entry is still there (%v)", err)
	}
}

// Every attempt gives the queue's keys the waiter TTL when theirs is
// shorter (the usual case) or missing, and never shortens a longer one.
func TestQueueKeysExpiry(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	key := "lock:{expiry}"
	if r, _ := acq(ctx, rdb, key, newToken(), 10*time.Second, false, time.Second, ""); !r.Granted {
		t.Fatal("holder")
	}
	ttl := func(k string) time.Duration { return rdb.PTTL(ctx, k).Val() }
	if r, _ := acq(ctx, rdb, key, newToken(), 10*time.Second, false, time.Second, "lock:{expiry}:w:x"); r.Granted {
		t.Fatal("granted")
	}
	for _, k := range []string{key + QueueSuffix, key + DeadlinesSuffix, key + WaitersSuffix} {
		if d := ttl(k); d <= 0 || d > time.Second {
			t.Fatalf("%s: PTTL %v after a join, want (0, 1s]", k, d)
		}
	}
	rdb.PExpire(ctx, key+QueueSuffix, 100*time.Millisecond)
	rdb.PExpire(ctx, key+DeadlinesSuffix, time.Minute)
	rdb.Persist(ctx, key+WaitersSuffix)
	if r, _ := acq(ctx, rdb, key, newToken(), 10*time.Second, false, time.Second, "lock:{expiry}:w:x"); r.Granted {
		t.Fatal("granted")
	}
	if d := ttl(key + QueueSuffix); d <= 100*time.Millisecond || d > time.Second {
		t.Fatalf("queue: PTTL %v, want raised to (100ms, 1s]", d)
	}
	if d := ttl(key + DeadlinesSuffix); d <= 50*time.Second {
		t.Fatalf("deadlines: PTTL %v, want the minute it had (never shortened)", d)
	}
	if d := ttl(key + WaitersSuffix); d <= 0 || d > time.Second {
		t.Fatalf("waiters: PTTL %v, want (0, 1s] (a key without one gets one)", d)
	}
}

// A release that hands nothing over still gives the lock back: the queue
// emptied by the prune (its one waiter dead), a head without a channel
// (it takes the lock itself), a fence counter the handover cannot read.
func TestReleaseWithoutHandoverFreesTheLock(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := tctx(t, 10*time.Second)
	for _, c := range []struct {
		name    string
		fencing bool
		wake    string
		setup   func(key, waiter string)
	}{
		{"dead waiter", false, "lock:{nohandover}:w:x", func(key, waiter string) {
			rdb.ZAdd(ctx, key+DeadlinesSuffix, redis.Z{Score: 1, Member: waiter})
		}},
		{"no channel", false, "", func(string, string) {}},
		{"bad counter", true, "lock:{nohandover}:w:x", func(key, _ string) {
			rdb.Set(ctx, key+FenceSuffix, "junk", 0)
		}},
	} {
		key := "lock:{nohandover}"
		rdb.FlushAll(ctx)
		holder, waiter := newToken(), newToken()
		if r, err := acq(ctx, rdb, key, holder, 10*time.Second, c.fencing, 2*time.Second, ""); err != nil || !r.Granted {
			t.Fatal(c.name, r, err)
		}
		if r, err := acq(ctx, rdb, key, waiter, 10*time.Second, c.fencing, 2*time.Second, c.wake); err != nil || r.Granted {
			t.Fatal(c.name, r, err)
		}
		c.setup(key, waiter)
		if held, err := Release(ctx, rdb, key, holder, ""); err != nil || !held {
			t.Fatal(c.name, held, err)
		}
		if n := rdb.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("%s: after a release that handed nothing over the lock still holds %q", c.name, rdb.Get(ctx, key).Val())
		}
	}
}
