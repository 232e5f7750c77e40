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
