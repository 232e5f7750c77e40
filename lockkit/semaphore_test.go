package lockkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
)

func semOn(d *Domain, id string) Semaphore {
	return d.Key(len(id) + 3).Literal("id:").String(id).Semaphore()
}

// A semaphore domain's keys are semaphores and nothing else, and a lock
// domain's are locks: the wrong builder's value refuses every call, naming
// the domain and its kind, before anything is sent.
func TestSemaphoreKindMismatch(t *testing.T) {
	c, err := New(goredis.New(fakeUniversal(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	sem := c.Domain(DomainSpec{Name: "partner", Policy: Policy{TTL: time.Second, Kind: "semaphore", Permits: 2}})
	lock := c.Domain(DomainSpec{Name: "table", Policy: Policy{TTL: time.Second}})
	ctx := context.Background()
	if err := lockOn(sem, "a").TryDo(ctx, func(context.Context, *Lease) error { return nil }); err == nil || !strings.Contains(err.Error(), `domain "partner" is kind semaphore: use its Semaphore`) {
		t.Errorf("Lock on a semaphore domain: %v", err)
	}
	if _, err := semOn(lock, "a").TryAcquire(ctx); err == nil || !strings.Contains(err.Error(), `domain "table" is kind lock, not semaphore`) {
		t.Errorf("Semaphore on a lock domain: %v", err)
	}
	if err := (Semaphore{}).Do(ctx, func(context.Context, *Lease) error { return nil }); !errors.Is(err, ErrNoClient) {
		t.Errorf("the zero Semaphore: %v", err)
	}
}

// A permit is a lease: taken away on the server (its slot key deleted), fn's
// ctx is cancelled with a cause matching ErrLockLost and Do returns it.
func TestSemaphoreLostPermit(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	c := newClient(t, r)
	sem := semOn(testDomain(t, c, Policy{TTL: 10 * time.Second, Renew: 50 * time.Millisecond, Kind: "semaphore", Permits: 2}), "lost")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cause error
	err := sem.Do(ctx, func(fctx context.Context, lease *Lease) error {
		if !strings.HasPrefix(lease.Key(), sem.Key()+":permit:") {
			t.Errorf("permit key %q is not a slot of %q", lease.Key(), sem.Key())
		}
		admin.Del(ctx, lease.Key())
		<-fctx.Done()
		cause = context.Cause(fctx)
		return nil
	})
	if !errors.Is(cause, ErrLockLost) || !errors.Is(err, ErrLockLost) {
		t.Errorf("a permit deleted on the server: fn's cause %v, Do %v; want ErrLockLost", cause, err)
	}
}

// wait fifo: waiters queue on the semaphore's gate in arrival order and get
// permits in that order; never more than Permits inside at once.
func TestSemaphoreFIFOOrder(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := r.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := Policy{TTL: 5 * time.Second, Wait: "fifo", Retry: Retry{Attempts: 2, MaxWait: 30 * time.Second}, Kind: "semaphore", Permits: 2}
	var doms []*Domain
	for range 3 {
		doms = append(doms, testDomain(t, newClient(t, r), p))
	}
	sem := semOn(doms[0], "fifo")
	// Hold both permits and the gate, so that every waiter queues.
	gate, err := Lock{d: doms[0], key: sem.Key()}.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var held []*Lease
	for range 2 {
		l, err := sem.TryAcquire(context.WithoutCancel(ctx))
		if err == nil {
			held = append(held, l)
		}
	}
	if len(held) != 0 {
		t.Fatalf("TryAcquire took %d permits while another held the gate; a FIFO semaphore's TryAcquire queues on the gate", len(held))
	}
	// The permits, through a poll domain on the same keys.
	direct := semOn(testDomain(t, doms[0].c, Policy{TTL: 5 * time.Second, Kind: "semaphore", Permits: 2}), "fifo")
	for range 2 {
		l, err := direct.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	const waiters = 6
	var (
		mu    sync.Mutex
		order []int
		in    overlap
		wg    sync.WaitGroup
		errs  = make(chan error, waiters)
	)
	for i := range waiters {
		s := semOn(doms[i%3], "fifo")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Do(ctx, func(context.Context, *Lease) error {
				defer in.enter()()
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				return nil
			})
		}()
		waitQueueLen(t, admin, gate.lock, int64(i+1))
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := gate.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// order is the order in which waiters entered fn, not the order of
	// their grants: two waiters holding the two permits at once enter in
	// either order (rehearsal E saw [1 0 2 3 4 5]). What FIFO grants imply
	// is this: when waiter w was granted, every earlier waiter had been
	// granted, and at most Permits-1 of them still held a permit (a waiter
	// holds its permit from its grant until fn returns). So at most
	// Permits-1 earlier waiters enter fn after w.
	if len(order) != waiters {
		t.Fatalf("%d waiters entered fn, want %d", len(order), waiters)
	}
	for at, w := range order {
		later := 0
		for _, v := range order[at+1:] {
			if v < w {
				later++
			}
		}
		if later > p.Permits-1 {
			t.Errorf("permits went to waiters in the order %v: %d waiters that arrived before waiter %d entered fn after it, more than the %d that can still hold a permit at its grant; want arrival order", order, later, w, p.Permits-1)
			break
		}
	}
	if m := in.Max(); m > 2 {
		t.Errorf("%d permit holders inside at once; the semaphore admits 2", m)
	}
}

// TestSemaphoreFIFOSingleAttempt: a FIFO semaphore whose policy makes a
// single attempt (Retry left zero, or Attempts 1 whatever its MaxWait) gives
// up at once when every permit is held, as a poll semaphore does, instead of
// polling the slots until ctx ends while it holds the gate (which also kept
// every other single-attempt caller off the gate). The wait-bounded domain
// beside it still waits for a freed permit.
func TestSemaphoreFIFOSingleAttempt(t *testing.T) {
	r := testserver.StartRedis(t)
	c := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Both permits, through a poll domain on the same keys.
	direct := semOn(testDomain(t, c, Policy{TTL: 10 * time.Second, Kind: "semaphore", Permits: 2}), "single")
	var held []*Lease
	for range 2 {
		l, err := direct.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for _, retry := range []Retry{{}, {Attempts: 1, MaxWait: 20 * time.Second}} {
		sem := semOn(testDomain(t, c, Policy{TTL: 10 * time.Second, Wait: "fifo", Retry: retry, Kind: "semaphore", Permits: 2}), "single")
		for _, call := range []struct {
			name string
			run  func(context.Context) error
		}{
			{"Do", func(ctx context.Context) error {
				return sem.Do(ctx, func(context.Context, *Lease) error { return errors.New("fn ran with every permit held") })
			}},
			{"Acquire", func(ctx context.Context) error {
				l, err := sem.Acquire(ctx)
				if err == nil {
					_ = l.Release(ctx)
				}
				return err
			}},
		} {
			// A ctx far longer than a single attempt takes: the call must
			// end by the policy, not by this ctx.
			cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
			err := call.run(cctx)
			ended := cctx.Err()
			ccancel()
			if !errors.Is(err, ErrNotAcquired) || ended != nil {
				t.Fatalf("%+v %s with every permit held: %v (ctx: %v); want ErrNotAcquired from a single attempt, before ctx ends", retry, call.name, err, ended)
			}
		}
	}
	// A waiting FIFO domain gets the permit freed while it waits.
	sem := semOn(testDomain(t, c, Policy{TTL: 10 * time.Second, Wait: "fifo", Retry: Retry{MaxWait: 20 * time.Second}, Kind: "semaphore", Permits: 2}), "single")
	done := make(chan error, 1)
	go func() { done <- sem.Do(ctx, func(context.Context, *Lease) error { return nil }) }()
	select {
	case err := <-done:
		t.Fatalf("a waiting FIFO semaphore returned %v with every permit held", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a waiting FIFO semaphore, after a permit was freed: %v", err)
	}
	_ = held[1].Release(ctx)
}
