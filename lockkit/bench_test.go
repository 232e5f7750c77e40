package lockkit

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// The baseline is what a careful hand-written lock costs: SET NX PX, then an
// EVALSHA compare-and-delete. Compare BenchmarkAcquireRelease to it within
// one run:
//
//	go test -run '^$' -bench 'AcquireRelease|Baseline' -benchmem -count 6 ./lockkit/
//
// Domains without fencing take the lock with a plain SET NX PX, as the
// baseline does; fencing domains run the acquire script.
func BenchmarkBaselineSetNXEvalsha(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	key := "lock:{bench:baseline}"
	b.ReportAllocs()
	for b.Loop() {
		token := rand.Text()
		ok, err := rdb.SetNX(ctx, key, token, 10*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if n, err := rediswire.ReleaseScript.Run(ctx, rdb, []string{key}, token).Int64(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkAcquireRelease(b *testing.B) { benchAcquireRelease(b, false) }

// BenchmarkAcquireReleaseAutoPipelined is BenchmarkAcquireRelease on
// autopipeline.New: what a lone caller pays for the autopipeliner.
func BenchmarkAcquireReleaseAutoPipelined(b *testing.B) {
	benchAcquireReleaseOn(b, autopipeline.New(benchRedis(b)), false)
}

// BenchmarkAcquireReleaseFenced takes the lock with the acquire script,
// which also issues the fencing number.
func BenchmarkAcquireReleaseFenced(b *testing.B) { benchAcquireRelease(b, true) }

func benchAcquireRelease(b *testing.B, fencing bool) {
	benchAcquireReleaseOn(b, goredis.New(benchRedis(b)), fencing)
}

func benchAcquireReleaseOn(b *testing.B, spec driver.Spec, fencing bool) {
	c, err := New(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second, Fencing: fencing}})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lease, err := d.Key(8).Literal("bench:").String("x").Lock().TryAcquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRedis(b *testing.B) *redis.Client {
	r := testserver.StartRedis(b)
	rdb := r.Client(b)
	// Load the scripts once so no run pays the NOSCRIPT fallback.
	for _, s := range []*redis.Script{rediswire.AcquireScript, rediswire.ReleaseScript, rediswire.ExtendScript} {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return rdb
}
