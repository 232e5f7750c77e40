package lockkit

import (
	"context"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTwoKeys compares, on one Redis server, uncontended, in one run:
// two nested Do calls; a 2-key DoAll taken by one script (the batched path,
// what DoAll does on one server or one Cluster slot); and the same DoAll
// taken one key at a time (its path across Cluster slots), on a client whose
// backend hides the batch:
//
//	go test -run '^$' -bench TwoKeys -benchmem -count 3 ./lockkit/
//
// "loopback" is direct; "reply+1ms" goes through an in-process toxiproxy
// that delays every reply by 1ms, a round trip as across a data centre,
// where the script's saved round trip shows.
func BenchmarkTwoKeys(b *testing.B) {
	for _, fencing := range []bool{false, true} {
		for _, delayed := range []bool{false, true} {
			name := "plain"
			if fencing {
				name = "fenced"
			}
			if delayed {
				name += "/reply+1ms"
			} else {
				name += "/loopback"
			}
			b.Run(name, func(b *testing.B) { benchTwoKeys(b, fencing, delayed) })
		}
	}
}

func benchTwoKeys(b *testing.B, fencing, delayed bool) {
	rdb := benchRedis(b)
	if err := rediswire.AcquireAllScript.Load(context.Background(), rdb).Err(); err != nil {
		b.Fatal(err)
	}
	if delayed {
		proxy := startToxiproxy(b, rdb.Options().Addr)
		addLatency(b, proxy, "rtt", time.Millisecond)
		o := *rdb.Options()
		o.Addr = proxy.Listen
		rdb = redis.NewClient(&o)
		defer rdb.Close()
	}
	domain := func(c *Client) (x, y Lock) {
		d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second, Fencing: fencing}})
		return d.Key(8).Literal("acct:").String("x").Lock(), d.Key(8).Literal("acct:").String("y").Lock()
	}
	c, err := New(goredis.New(rdb))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	x, y := domain(c)
	if batcherFor([]Lock{x, y}) == nil {
		b.Fatal("the set is not batched")
	}
	c1, err := New(driver.Spec{Name: "redis", Open: func(cfg driver.Config) (driver.Backend, error) {
		be, err := goredis.New(rdb).Open(cfg)
		return oneByOne{be}, err
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer c1.Close(context.Background())
	x1, y1 := domain(c1)
	if batcherFor([]Lock{x1, y1}) != nil {
		b.Fatal("the one-by-one client batches")
	}
	ctx := context.Background()
	noop := func(context.Context, *Lease) error { return nil }
	b.Run("nested_do", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			err := x.Do(ctx, func(ctx context.Context, _ *Lease) error { return y.Do(ctx, noop) })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("do_all_one_script", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := DoAll(ctx, func(context.Context, *LeaseSet) error { return nil }, x, y); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("do_all_one_by_one", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := DoAll(ctx, func(context.Context, *LeaseSet) error { return nil }, x1, y1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// oneByOne is a Redis backend without its Batcher: DoAll takes a set on it
// one key at a time, as across Cluster slots.
type oneByOne struct{ driver.Backend }

// Capabilities are the Redis backend's, without batching, a queue or the holder read.
func (b oneByOne) Capabilities() driver.Capabilities {
	c := b.Backend.Capabilities()
	c.Batching, c.FairQueue, c.Holders = false, false, false
	return c
}
