package lockkittest_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/lockkittest"
)

// Two replicas on one embedded store exclude each other through the generated
// helpers: at most one is inside the section at a time, and every Do ran.
func TestReplicasExcludeEachOther(t *testing.T) {
	s := lockkittest.NewServer(t)
	replicas := []*locks.Locks{locks.New(s.NewClient()), locks.New(s.NewClient())}
	var inside, overlaps, done atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		l := replicas[i%2]
		wg.Go(func() {
			err := l.Table("12").Do(t.Context(), func(ctx context.Context, lease *lockkit.Lease) error {
				if lease.Fence() <= 0 {
					t.Errorf("fence %d on a fencing domain", lease.Fence())
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				done.Add(1)
				return nil
			})
			if err != nil {
				t.Errorf("Do: %v", err)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 || done.Load() != 8 {
		t.Errorf("%d overlaps, %d of 8 sections ran", overlaps.Load(), done.Load())
	}
}

// TTLs expire on their own: a lease left unreleased (a crashed holder) frees
// its key by its TTL, so another client gets it without the test moving a
// clock. Without ClockTTL, miniredis would keep the key for ever.
func TestTTLExpiresOnTheRealClock(t *testing.T) {
	s := lockkittest.NewServer(t)
	a, b := s.NewClient(), s.NewClient()
	spec := lockkit.DomainSpec{Name: "short", Pattern: "short:{id}", Policy: lockkit.Policy{TTL: time.Second, Renew: -1}}
	dom, domB := a.Domain(spec), b.Domain(spec)
	if err := dom.Err(); err != nil {
		t.Fatal(err)
	}
	//lockkit-vet:ignore a crashed holder: the lease is never released, on purpose
	if _, err := dom.Key(10).Literal("short:").String("x").Lock().TryAcquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	//lockkit-vet:ignore expected to fail: the key is held
	if _, err := domB.Key(10).Literal("short:").String("x").Lock().TryAcquire(t.Context()); !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Fatalf("second TryAcquire while held: %v, want ErrNotAcquired", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		lease, err := domB.Key(10).Literal("short:").String("x").Lock().TryAcquire(t.Context())
		if err == nil {
			if err := lease.Release(t.Context()); err != nil {
				t.Error(err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key never expired: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Steal makes the holder lose its lock mid-fn: fn's ctx ends with a cause
// matching ErrLockLost, and Do reports the loss.
func TestStealReportsLoss(t *testing.T) {
	s := lockkittest.NewServer(t)
	l := locks.New(s.NewClient())
	err := l.Table("7").Do(t.Context(), func(ctx context.Context, lease *lockkit.Lease) error {
		if lease.Fence() <= 0 {
			t.Errorf("fence %d on a fencing domain", lease.Fence())
		}
		s.Steal(lease.Key())
		if err := lease.Extend(ctx); !errors.Is(err, lockkit.ErrNotHeld) {
			t.Errorf("Extend after Steal: %v, want ErrNotHeld", err)
		}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), lockkit.ErrLockLost) {
			t.Errorf("fn's ctx cause %v, want ErrLockLost", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, lockkit.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
}

// The clients are closed when the test ends; a test may close one earlier.
func TestClientClosedAtCleanup(t *testing.T) {
	var c *lockkit.Client
	t.Run("inner", func(t *testing.T) {
		c = lockkittest.NewClient(t)
		if err := c.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	_, err := locks.New(c).Table("1").TryAcquire(context.Background())
	if !errors.Is(err, lockkit.ErrClosed) {
		t.Fatalf("after the test ended: %v, want ErrClosed", err)
	}
}
