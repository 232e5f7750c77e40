package lockkit

import (
	"context"
	"crypto/rand"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/internal/rediswire"
)

// The parallel case of issue 24: 32 goroutines share one go-redis client
// (its default pool), each taking and giving back a key of its own, so there
// is no contention and the figure is CPU per cycle. On two cores that is what
// bounds it. Compare the two as paired ratios in one run:
//
//	scripts/benchpair.sh -r 8 -n 100000 ./lockkit ParallelBaseline ParallelAcquireRelease
//
// or, sequentially, with allocations:
//
//	go test -run '^$' -bench 'Parallel(Baseline|AcquireRelease)$' -benchmem -count 6 ./lockkit/
const parallelGoroutines = 32

// setParallel makes b.RunParallel start parallelGoroutines goroutines
// whatever GOMAXPROCS is (RunParallel starts parallelism × GOMAXPROCS), and
// reports cpu-µs/op: this process's user+system CPU per cycle (getrusage),
// the figure that bounds the parallel case on a small machine and the one
// least moved by other load on it (redis-server's CPU is not in it; both
// sides send it the same commands).
func setParallel(b *testing.B) {
	b.SetParallelism(max(1, parallelGoroutines/runtime.GOMAXPROCS(0)))
	start := processCPU()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64((processCPU()-start).Microseconds())/float64(b.N), "cpu-µs/op")
		}
	})
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkParallelBaseline is the raw floor of BenchmarkBaselineSetNXEvalsha
// (SET NX PX, then an EVALSHA compare-and-delete), run in parallel.
func BenchmarkParallelBaseline(b *testing.B) {
	rdb := benchRedis(b)
	ctx := context.Background()
	var next atomic.Int64
	setParallel(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		key := "lock:{bench:baseline:" + strconv.FormatInt(next.Add(1), 10) + "}"
		for pb.Next() {
			token := rand.Text()
			ok, err := rdb.SetNX(ctx, key, token, 10*time.Second).Result()
			if err != nil || !ok {
				b.Error(ok, err)
				return
			}
			if n, err := rediswire.ReleaseScript.Run(ctx, rdb, []string{key}, token).Int64(); err != nil || n != 1 {
				b.Error(n, err)
				return
			}
		}
	})
}

// BenchmarkParallelAcquireRelease is BenchmarkAcquireRelease (a polling
// domain without fencing: TryAcquire, Release) in parallel on one Client.
func BenchmarkParallelAcquireRelease(b *testing.B) {
	benchParallelAcquireRelease(b, Policy{TTL: 10 * time.Second})
}

// BenchmarkParallelAcquireReleaseAutoPipelined is the same on
// autopipeline.New.
func BenchmarkParallelAcquireReleaseAutoPipelined(b *testing.B) {
	rdb := benchRedis(b)
	benchParallelOn(b, autopipeline.New(rdb), Policy{TTL: 10 * time.Second})
}

// BenchmarkParallelAcquireReleaseFIFO is the same on a FIFO domain.
func BenchmarkParallelAcquireReleaseFIFO(b *testing.B) {
	benchParallelAcquireRelease(b, Policy{TTL: 10 * time.Second, Wait: "fifo"})
}

func benchParallelAcquireRelease(b *testing.B, p Policy) {
	benchParallelOn(b, goredis.New(benchRedis(b)), p)
}

func benchParallelOn(b *testing.B, spec driver.Spec, p Policy) {
	c, err := New(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(DomainSpec{Name: "bench", Policy: p})
	ctx := context.Background()
	var next atomic.Int64
	setParallel(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			lease, err := d.Key(8).Literal("bench:").String(id).Lock().TryAcquire(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if err := lease.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
