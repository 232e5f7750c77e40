package lockkit

import (
	"context"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/internal/policy"
	"github.com/lockkit/lockkit/internal/testlog"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/telemetry"
	"github.com/redis/go-redis/v9"
)

// fakeUniversal is a go-redis client pointed at a closed port: for tests that
// need a client value but never send a command.
func fakeUniversal(t *testing.T) redis.UniversalClient {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newClient is a lockkit client over its own go-redis client, as a separate
// replica of a service would have. It is closed when the test ends.
func newClient(t *testing.T, r *testserver.Redis, opts ...Option) *Client {
	t.Helper()
	return newClientOver(t, r.Client(t), opts...)
}

// newClientOver is newClient over a given go-redis client (Sentinel,
// Cluster, a proxied one).
func newClientOver(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	return newClientOn(t, goredis.New(rdb), opts...)
}

// newClientOn is newClient over any backend, closed with the test.
func newClientOn(t *testing.T, be driver.Spec, opts ...Option) *Client {
	t.Helper()
	c, err := New(be, append(testOptions(t), opts...)...)
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

// fenceSuffix ends a lock key's fence counter key (policy.FenceKey).
const fenceSuffix = policy.FenceSuffix

// testDomain binds a domain named after the test, so tests never share keys.
func testDomain(t *testing.T, c *Client, p Policy) *Domain {
	t.Helper()
	d := c.Domain(DomainSpec{Name: "test", Prefix: "lock:" + t.Name() + ":", Policy: p})
	if d.err != nil {
		t.Fatal(d.err)
	}
	return d
}

func lockOn(d *Domain, id string) Lock {
	return d.Key(len(id) + 3).Literal("id:").String(id).Lock()
}

// testOptions are the options of every test client: its log lines go to the
// test log, under the run's key mode and scanned for a raw key in a hashed
// run (internal/testlog); options a test passes itself come after these and
// win.
func testOptions(t *testing.T) []Option {
	return []Option{WithLogger(testlog.Logger(t)), WithKeyMode(testlog.KeyMode())}
}

// rawKeyOptions are for a test that checks what the default key mode
// (KeyRaw) records: its client logs and records raw keys in every run, and
// its log lines are not scanned.
func rawKeyOptions(t *testing.T) []Option {
	return []Option{WithLogger(testlog.RawLogger(t)), WithKeyMode(telemetry.KeyRaw, nil)}
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
