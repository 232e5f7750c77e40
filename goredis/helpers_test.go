package goredis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testlog"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

// The Redis backend's tests drive the real Client, through its public API.
type (
	Policy     = lockkit.Policy
	Retry      = lockkit.Retry
	Option     = lockkit.Option
	Client     = lockkit.Client
	Lease      = lockkit.Lease
	DomainSpec = lockkit.DomainSpec
	Health     = lockkit.Health
)

var (
	ErrNotAcquired     = lockkit.ErrNotAcquired
	ErrUnavailable     = lockkit.ErrUnavailable
	ErrNotHeld         = lockkit.ErrNotHeld
	ErrLockLost        = lockkit.ErrLockLost
	WithCommandTimeout = lockkit.WithCommandTimeout
	WithBreaker        = lockkit.WithBreaker
)

// newClient is a lockkit client over its own go-redis client, closed when
// the test ends.
func newClient(t *testing.T, r *testserver.Redis, opts ...Option) *Client {
	t.Helper()
	c, err := lockkit.New(New(r.Client(t)), append(testOptions(t), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// testDomain binds a domain named after the test, so tests never share keys.
func testDomain(t *testing.T, c *Client, p Policy) *lockkit.Domain {
	t.Helper()
	d := c.Domain(DomainSpec{Name: "test", Prefix: "lock:" + t.Name() + ":", Policy: p})
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

func lockOn(d *lockkit.Domain, id string) lockkit.Lock {
	return d.Key(len(id) + 3).Literal("id:").String(id).Lock()
}

// testOptions are the options of every test client: its log lines go to the
// test log, under the run's key mode and scanned for a raw key in a hashed
// run (internal/testlog).
func testOptions(t *testing.T) []Option {
	return []Option{lockkit.WithLogger(testlog.Logger(t)), lockkit.WithKeyMode(testlog.KeyMode())}
}

// overlap measures mutual exclusion: every critical section calls enter and
// the returned leave; Max is the most sections that were ever inside at once.
type overlap struct{ in, max atomic.Int32 }

func (o *overlap) enter() (leave func()) {
	n := o.in.Add(1)
	for m := o.max.Load(); n > m && !o.max.CompareAndSwap(m, n); m = o.max.Load() {
	}
	return func() { o.in.Add(-1) }
}

// Max is the most sections that were inside at once.
func (o *overlap) Max() int32 { return o.max.Load() }

// incrNonAtomic increments a Redis counter by GET then SET, pausing in
// between: two overlapping sections lose an increment.
func incrNonAtomic(ctx context.Context, rdb *redis.Client, key string, pause time.Duration) error {
	v, err := rdb.Get(ctx, key).Int()
	if err != nil && err != redis.Nil {
		return err
	}
	if pause > 0 {
		time.Sleep(pause)
	}
	return rdb.Set(ctx, key, v+1, 0).Err()
}

// benchRedis is a server for benchmarks, with the scripts loaded so no run
// pays the NOSCRIPT fallback.
func benchRedis(b *testing.B) *redis.Client {
	r := testserver.StartRedis(b)
	rdb := r.Client(b)
	for _, s := range []*redis.Script{rediswire.AcquireScript, rediswire.ReleaseScript, rediswire.ExtendScript} {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return rdb
}
