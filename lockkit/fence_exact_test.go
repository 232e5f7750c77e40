package lockkit

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/testserver"
)

// Fences are exact integers up to 2^63−1 on every path that issues one: a
// counter past 2^53 (where Lua's doubles stop telling neighbours apart) goes
// up by exactly one per grant, on the one-lock script, DoAll's one-step
// script, a FIFO grant and a FIFO handover. Only reachable by writing into
// the counter, but a fence must never repeat.
func TestFenceExactPast2To53(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	seed := func(t *testing.T, l Lock, v int64) {
		t.Helper()
		if err := rdb.Set(t.Context(), l.Key()+fenceSuffix, strconv.FormatInt(v, 10), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, start := range []int64{1 << 53, 1<<60 + 1, math.MaxInt64 - 3} {
		t.Run(strconv.FormatInt(start, 10), func(t *testing.T) {
			poll := lockOn(testDomain(t, newClient(t, r), fencing(time.Second)), "poll")
			seed(t, poll, start)
			if got := acquireFence(t, poll); got != start+1 {
				t.Fatalf("Acquire: fence %d after counter %d, want %d", got, start, start+1)
			}
			if got := acquireFence(t, poll); got != start+2 {
				t.Fatalf("Acquire: second fence %d, want %d", got, start+2)
			}

			c := newClient(t, r)
			d := testDomain(t, c, fencing(time.Second))
			a, b := lockOn(d, "a"), lockOn(d, "b")
			seed(t, a, start)
			seed(t, b, start+1)
			err := DoAll(t.Context(), func(ctx context.Context, set *LeaseSet) error {
				if fa, fb := set.Lease(a).Fence(), set.Lease(b).Fence(); fa != start+1 || fb != start+2 {
					t.Errorf("DoAll: fences %d, %d, want %d, %d", fa, fb, start+1, start+2)
				}
				return nil
			}, a, b)
			if err != nil {
				t.Fatal(err)
			}

			fp := fifoPolicy(time.Second, 5*time.Second)
			fp.Fencing = true
			fd := testDomain(t, newClient(t, r), fp)
			f := lockOn(fd, "fifo")
			seed(t, f, start)
			held, err := f.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if held.Fence() != start+1 {
				t.Errorf("FIFO grant: fence %d, want %d", held.Fence(), start+1)
			}
			// A waiter queues behind the holder; the release hands it over.
			got := make(chan int64, 1)
			go func() {
				lease, err := lockOn(testDomain(t, newClient(t, r), fp), "fifo").Acquire(t.Context())
				if err != nil {
					t.Error(err)
					got <- 0
					return
				}
				got <- lease.Fence()
				_ = lease.Release(context.Background())
			}()
			waitQueueLen(t, rdb, f, 1)
			if err := held.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if fence := <-got; fence != start+2 {
				t.Errorf("FIFO handover: fence %d, want %d", fence, start+2)
			}
		})
	}
}
