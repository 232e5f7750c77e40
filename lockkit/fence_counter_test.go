package lockkit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockkit/lockkit/breaker"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// wantCounterExpiry checks a fence counter's expiry against the rule
// (policy.NextFenceLua): it expires at the moment its fence f stands for,
// f/1000 ms, plus max(the lock's TTL, policy.FenceKeep). Exact, from
// PEXPIRETIME: no clock is read.
func wantCounterExpiry(t *testing.T, rdb *redis.Client, l Lock, f int64, ttl time.Duration) {
	t.Helper()
	at, err := rdb.Do(t.Context(), "pexpiretime", l.Key()+fenceSuffix).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if want := f/1000 + max(ttl, policy.FenceKeep).Milliseconds(); at != want {
		t.Fatalf("%s%s: PEXPIRETIME %d after fence %d, want %d (f/1000 + max(TTL %v, FenceKeep %v)); -1 is no expiry",
			l.Key(), fenceSuffix, at, f, want, ttl, policy.FenceKeep)
	}
}

// Issue 26: fence counters expire under the rule that keeps fences from
// repeating (docs/semantics.md, guarantee 3), on every path that issues a
// fence: Acquire, DoAll's one-step script, a FIFO grant and a FIFO handover,
// also over a counter an older version left without expiry; an extend keeps
// the counter at least as long as its lock. After the counter is gone (as
// expiry leaves it), the next fence is still above every earlier one.
func TestFenceCounterExpires(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	for _, ttl := range []time.Duration{2 * time.Second, policy.FenceKeep + time.Minute} {
		t.Run(ttl.String(), func(t *testing.T) {
			poll := lockOn(testDomain(t, newClient(t, r), fencing(ttl)), "poll")
			// A counter v0.1.0 left: no expiry; the grant gives it one.
			if err := rdb.Set(ctx, poll.Key()+fenceSuffix, "5", 0).Err(); err != nil {
				t.Fatal(err)
			}
			lease, err := poll.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantCounterExpiry(t, rdb, poll, lease.Fence(), ttl)
			// An extend keeps the counter at least max(TTL, FenceKeep)
			// from now: shorten it, then extend.
			if err := rdb.PExpire(ctx, poll.Key()+fenceSuffix, 50*time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			if err := lease.Extend(ctx); err != nil {
				t.Fatal(err)
			}
			if pttl := rdb.PTTL(ctx, poll.Key()+fenceSuffix).Val(); pttl < max(ttl, policy.FenceKeep)-time.Minute {
				t.Fatalf("after Extend the counter's PTTL is %v, want about max(TTL %v, FenceKeep %v)", pttl, ttl, policy.FenceKeep)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			earlier := lease.Fence()
			for range 3 {
				earlier = max(earlier, acquireFence(t, poll))
			}
			// Gone, as expiry would leave it: the next fence is above.
			if err := rdb.Del(ctx, poll.Key()+fenceSuffix).Err(); err != nil {
				t.Fatal(err)
			}
			if f := acquireFence(t, poll); f <= earlier {
				t.Fatalf("after the counter was deleted: fence %d, not above the earlier %d", f, earlier)
			} else {
				wantCounterExpiry(t, rdb, poll, f, ttl)
			}

			d := testDomain(t, newClient(t, r), fencing(ttl))
			a, b := lockOn(d, "a"), lockOn(d, "b")
			err = DoAll(ctx, func(ctx context.Context, set *LeaseSet) error {
				wantCounterExpiry(t, rdb, a, set.Lease(a).Fence(), ttl)
				wantCounterExpiry(t, rdb, b, set.Lease(b).Fence(), ttl)
				return nil
			}, a, b)
			if err != nil {
				t.Fatal(err)
			}

			fp := fifoPolicy(ttl, 5*time.Second)
			fp.Fencing = true
			f := lockOn(testDomain(t, newClient(t, r), fp), "fifo")
			held, err := f.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantCounterExpiry(t, rdb, f, held.Fence(), ttl)
			got := make(chan int64, 1)
			go func() {
				lease, err := lockOn(testDomain(t, newClient(t, r), fp), "fifo").Acquire(ctx)
				if err != nil {
					t.Error(err)
					got <- 0
					return
				}
				got <- lease.Fence()
				_ = lease.Release(context.Background())
			}()
			waitQueueLen(t, rdb, f, 1)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			fence := <-got
			if fence <= held.Fence() {
				t.Fatalf("FIFO handover: fence %d, not above %d", fence, held.Fence())
			}
			// The handover sets min(lock TTL, waiter TTL) on the lock, so the
			// counter gets at least FenceKeep; the new holder's first renewal
			// (brought forward by that shorter TTL) may already have moved it
			// to max(TTL, FenceKeep) from the renewal (a minute of slack).
			at := rdb.Do(ctx, "pexpiretime", f.Key()+fenceSuffix).Val()
			if at, _ := at.(int64); at < fence/1000+policy.FenceKeep.Milliseconds() || at > fence/1000+(max(ttl, policy.FenceKeep)+time.Minute).Milliseconds() {
				t.Fatalf("FIFO handover: counter PEXPIRETIME %d after fence %d, want within [f/1000+FenceKeep, f/1000+max(TTL, FenceKeep)+1m]", at, fence)
			}
		})
	}
}

// junkCounters are values under a fence counter that are no fence, and
// what each is.
var junkCounters = []struct {
	name string
	put  func(ctx context.Context, rdb *redis.Client, key string) error
}{
	{"text", func(ctx context.Context, rdb *redis.Client, k string) error { return rdb.Set(ctx, k, "abc", 0).Err() }},
	{"float", func(ctx context.Context, rdb *redis.Client, k string) error { return rdb.Set(ctx, k, "1.5", 0).Err() }},
	{"max", func(ctx context.Context, rdb *redis.Client, k string) error {
		return rdb.Set(ctx, k, "9223372036854775807", 0).Err() // INCR cannot raise it
	}},
	{"too big", func(ctx context.Context, rdb *redis.Client, k string) error {
		return rdb.Set(ctx, k, "99999999999999999999", 0).Err()
	}},
	{"hash", func(ctx context.Context, rdb *redis.Client, k string) error { return rdb.HSet(ctx, k, "f", "1").Err() }},
	{"list", func(ctx context.Context, rdb *redis.Client, k string) error { return rdb.RPush(ctx, k, "1").Err() }},
}

// wantCounterError checks the error of a fence counter that is no fence
// (issue 31): not ErrUnavailable, not retried (driver.ErrFinal), naming the
// counter's key and how to repair it.
func wantCounterError(t *testing.T, what string, err error, counter string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: no error over a junk counter", what)
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrNotAcquired):
		t.Fatalf("%s: %v: matches ErrUnavailable or ErrNotAcquired, want a data error", what, err)
	case !errors.Is(err, driver.ErrFinal):
		t.Fatalf("%s: %v: does not match driver.ErrFinal (it would be retried)", what, err)
	case !strings.Contains(err.Error(), strconv.Quote(counter)), !strings.Contains(err.Error(), "DEL "):
		t.Fatalf("%s: %v: names not the counter %q or how to repair it", what, err, counter)
	}
}

// Issue 31: a fence counter that cannot be read as one fails the grant with
// an error that names the key and says how to repair it, is no
// ErrUnavailable, is not retried and not counted by the breaker, and takes
// no lock, on every path that issues a fence (Acquire, DoAll, a FIFO grant
// and handover) and reads one (an election's Leader). Deleting the counter
// repairs it.
func TestFenceCounterJunk(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	ctx := t.Context()
	// One failure would open this breaker: a counted data error shows.
	opened := 0
	c := newClient(t, r, WithBreaker(breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Minute,
		OnStateChange: func(_ string, _, to breaker.State) {
			if to == breaker.StateOpen {
				opened++
			}
		}}))
	fp := fifoPolicy(time.Second, 5*time.Second)
	fp.Fencing = true
	for _, j := range junkCounters {
		t.Run(j.name, func(t *testing.T) {
			poll := lockOn(testDomain(t, c, fencing(time.Second)), "poll")
			fk := poll.Key() + fenceSuffix
			if err := j.put(ctx, rdb, fk); err != nil {
				t.Fatal(err)
			}
			_, err := poll.Acquire(ctx) // retries 1000 times on a retryable error
			wantCounterError(t, "Acquire", err, fk)
			if n := rdb.Exists(ctx, poll.Key()).Val(); n != 0 {
				t.Fatalf("Acquire: the lock key exists after the error")
			}
			t.Logf("Acquire: %v", err)

			d := testDomain(t, c, fencing(time.Second))
			a, b := lockOn(d, "a"), lockOn(d, "b")
			if err := j.put(ctx, rdb, b.Key()+fenceSuffix); err != nil {
				t.Fatal(err)
			}
			err = DoAll(ctx, func(context.Context, *LeaseSet) error { return nil }, a, b)
			wantCounterError(t, "DoAll", err, b.Key()+fenceSuffix)
			if n := rdb.Exists(ctx, a.Key(), b.Key()).Val(); n != 0 {
				t.Fatalf("DoAll: %d lock keys exist after the error", n)
			}

			f := lockOn(testDomain(t, c, fp), "fifo")
			if err := j.put(ctx, rdb, f.Key()+fenceSuffix); err != nil {
				t.Fatal(err)
			}
			_, err = f.Acquire(ctx)
			wantCounterError(t, "FIFO grant", err, f.Key()+fenceSuffix)
			if n := rdb.Exists(ctx, f.Key()).Val(); n != 0 {
				t.Fatalf("FIFO grant: the lock key exists after the error")
			}

			// A handover over a counter junked while the lock was held: the
			// release succeeds and hands nothing over; the waiter, on its
			// own attempt, gets the error.
			h := lockOn(testDomain(t, c, fp), "handover")
			held, err := h.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				_, err := lockOn(testDomain(t, newClient(t, r), fp), "handover").Acquire(ctx)
				got <- err
			}()
			waitQueueLen(t, rdb, h, 1)
			if err := rdb.Del(ctx, h.Key()+fenceSuffix).Err(); err != nil {
				t.Fatal(err)
			}
			if err := j.put(ctx, rdb, h.Key()+fenceSuffix); err != nil {
				t.Fatal(err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("FIFO release before a junk counter: %v", err)
			}
			wantCounterError(t, "FIFO waiter after the handover", <-got, h.Key()+fenceSuffix)

			// Repair: delete the counter; the next grant issues TIME.
			if err := rdb.Del(ctx, fk).Err(); err != nil {
				t.Fatal(err)
			}
			if f := acquireFence(t, poll); f < serverMicros(t, rdb)-int64(time.Minute/time.Microsecond) {
				t.Fatalf("after repair: fence %d, want the server's clock in µs", f)
			}
		})
	}
	if opened != 0 {
		t.Fatalf("the breaker opened %d times on data errors", opened)
	}
}

// An election's Leader reads the fence from the counter: a counter of
// another type is the same data error, and one holding text is too.
func TestLeaderJunkCounter(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	c := newClient(t, r)
	ctx := t.Context()
	for _, j := range junkCounters {
		t.Run(j.name, func(t *testing.T) {
			d := c.Domain(DomainSpec{Name: "elect", Prefix: "lock:" + t.Name() + ":", Policy: Policy{TTL: time.Second, Kind: "election", Fencing: true}})
			e := d.Key(1).Literal("x").Election()
			if err := rdb.Set(ctx, e.Key(), "tok", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if err := j.put(ctx, rdb, e.Key()+fenceSuffix); err != nil {
				t.Fatal(err)
			}
			_, err := e.Leader(ctx)
			if j.name == "max" {
				if err != nil {
					t.Fatalf("Leader over a counter at 2^63-1: %v", err)
				}
				return
			}
			wantCounterError(t, "Leader", err, e.Key()+fenceSuffix)
		})
	}
}
