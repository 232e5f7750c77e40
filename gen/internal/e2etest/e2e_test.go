package e2etest

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
)

// newClient starts a redis-server of its own for the test and returns a
// lockkit client on it.
func newClient(t *testing.T) *lockkit.Client {
	t.Helper()
	testserver.RequireRedis(t)
	srv := testserver.StartRedis(t)
	c, err := lockkit.New(goredis.New(srv.Client(t)))
	if err != nil {
		t.Fatalf("lockkit.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// setDefault binds the package-level helpers for one test.
func setDefault(t *testing.T, c *lockkit.Client) {
	SetDefault(c)
	t.Cleanup(func() { SetDefault(nil) })
}

// Goroutines racing Do on one key run fn one at a time; every one of them
// gets its turn (the domain retries for long enough).
func TestDoIsExclusive(t *testing.T) {
	c := newClient(t)
	setDefault(t, c)
	ctx := context.Background()

	const workers, rounds = 4, 5
	var inside, maxInside, runs atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, workers*rounds)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for r := 0; r < rounds; r++ {
				errs <- Counter("shared").Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					for {
						m := maxInside.Load()
						if n <= m || maxInside.CompareAndSwap(m, n) {
							break
						}
					}
					runs.Add(1)
					time.Sleep(5 * time.Millisecond) // hold it long enough for the others to collide
					return nil
				})
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Do: %v", err)
		}
	}
	if got := maxInside.Load(); got != 1 {
		t.Errorf("%d holders at once, want 1", got)
	}
	if got := runs.Load(); got != workers*rounds {
		t.Errorf("fn ran %d times, want %d", got, workers*rounds)
	}
}

// While one key is held, another value of the same domain locks
// independently, and so do values that differ only in characters the key
// escapes.
func TestDifferentValuesLockIndependently(t *testing.T) {
	l := New(newClient(t)) // the value form
	ctx := context.Background()

	held, err := l.Counter("a").Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer held.Release(ctx)

	if _, err := l.Counter("a").TryAcquire(ctx); !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
	}
	err = l.Counter("a").TryDo(ctx, func(context.Context, *lockkit.Lease) error {
		t.Error("TryDo ran fn on a held key")
		return nil
	})
	if !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Errorf("TryDo of a held key: %v, want ErrNotAcquired", err)
	}
	// ":" is escaped as "%3A": "a:b" and "a%3Ab" must still be two keys.
	for _, other := range []string{"b", "", "a:b", "a%3Ab", "a}", "{a"} {
		lease, err := l.Counter(other).TryAcquire(ctx)
		if err != nil {
			t.Errorf("TryAcquire(%q) while %q is held: %v", other, "a", err)
			continue
		}
		defer lease.Release(ctx)
	}
	// Same values, different domains, different keys.
	lease, err := l.Fenced(7).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Fenced(7): %v", err)
	}
	defer lease.Release(ctx)
	if _, err := l.Fenced(7).TryAcquire(ctx); !errors.Is(err, lockkit.ErrNotAcquired) {
		t.Errorf("Fenced(7) twice: %v, want ErrNotAcquired", err)
	}
	if lease2, err := l.Fenced(8).TryAcquire(ctx); err != nil {
		t.Errorf("Fenced(8) while Fenced(7) is held: %v", err)
	} else if err := lease2.Release(ctx); err != nil {
		t.Errorf("release Fenced(8): %v", err)
	}
}

// Each parameter type lands in the key through its encoder, in pattern order.
func TestKeys(t *testing.T) {
	l := New(newClient(t))
	tests := []struct {
		got, want string
	}{
		{l.Counter("x").Key(), "e2e:{counter:x}"},
		{l.Counter("a:b{c}%").Key(), "e2e:{counter:a%3Ab%7Bc%7D%25}"},
		{l.Counter("").Key(), "e2e:{counter:}"},
		{l.Multi("s", -1, math.MinInt32, math.MinInt64, 2, math.MaxUint32, math.MaxUint64).Key(),
			"e2e:{multi:s:-1:-2147483648:-9223372036854775808:2:4294967295:18446744073709551615}"},
		{l.Fenced(42).Key(), "e2e:{fenced:42}"},
		{l.Shadow("a", "b", "c", "d", "e").Key(), "e2e:{shadow:a:b:c:d:e}"},
		{l.Singleton().Key(), "e2e:{singleton}"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("key %q, want %q", tt.got, tt.want)
		}
	}
}

// The package-level helpers use the default set by SetDefault: before it,
// or after SetDefault(nil), they fail with ErrNoClient and never panic. So
// does a Locks made from a nil client.
func TestWithoutDefault(t *testing.T) {
	SetDefault(nil)
	ctx := context.Background()
	ran := false
	fn := func(context.Context, *lockkit.Lease) error { ran = true; return nil }
	checks := map[string]error{
		"Do":          Counter("x").Do(ctx, fn),
		"TryDo":       Multi("s", 1, 2, 3, 4, 5, 6).TryDo(ctx, fn),
		"New(nil).Do": New(nil).Fenced(1).Do(ctx, fn),
	}
	//lockkit-vet:ignore no client is set: the call fails, and the error is what is checked
	_, checks["Acquire"] = Fenced(1).Acquire(ctx)
	//lockkit-vet:ignore no client is set: the call fails, and the error is what is checked
	_, checks["TryAcquire"] = Singleton().TryAcquire(ctx)
	for name, err := range checks {
		if !errors.Is(err, lockkit.ErrNoClient) {
			t.Errorf("%s without a default: %v, want ErrNoClient", name, err)
		}
	}
	if ran {
		t.Error("fn ran without a client")
	}

	// With a default, the same call works; after SetDefault(nil) it fails again.
	setDefault(t, newClient(t))
	if err := Counter("x").Do(ctx, fn); err != nil || !ran {
		t.Fatalf("Do with a default: %v (ran %v)", err, ran)
	}
	SetDefault(nil)
	if err := Counter("x").Do(ctx, fn); !errors.Is(err, lockkit.ErrNoClient) {
		t.Errorf("Do after SetDefault(nil): %v, want ErrNoClient", err)
	}
}

// The generated policy reaches the runtime: a fencing domain numbers its
// leases in increasing order, and the others do not.
func TestPolicyReachesRuntime(t *testing.T) {
	l := New(newClient(t))
	ctx := context.Background()
	var last int64
	for i := 0; i < 3; i++ {
		err := l.Fenced(9).Do(ctx, func(_ context.Context, lease *lockkit.Lease) error {
			if f := lease.Fence(); f <= last {
				t.Errorf("fence %d after %d, want it to increase", f, last)
			} else {
				last = f
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	}
	err := l.Counter("c").Do(ctx, func(_ context.Context, lease *lockkit.Lease) error {
		if f := lease.Fence(); f != 0 {
			t.Errorf("a domain without fencing gave fence %d, want 0", f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Building a key costs what the runtime's KeyBuilder costs and no more: no
// fmt, no intermediate strings. It opens no connection.
func BenchmarkKey(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	c, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		b.Fatal(err)
	}
	l := New(c)
	b.Run("string", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Counter("order-12345")
		}
	})
	b.Run("seven_params", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Multi("s", -1, 2, 3, 4, 5, 6)
		}
	})
}
