package lockkit

import (
	"context"
	"crypto/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/goredis/autopipeline"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/redis/go-redis/v9"
)

// BenchmarkParallelPair runs the raw floor (BenchmarkParallelBaseline's
// cycle) and lockkit's (BenchmarkParallelAcquireRelease's) in one process,
// on one client and one redis-server, in slices of pairSlice cycles that
// alternate A B B A, each slice on parallelGoroutines goroutines. Both sides
// see the same machine at nearly the same moment, so a drift in the shared
// machine's speed (which moves whole runs of either benchmark by ±20% here)
// falls on both; the figure to read is ratio: lockkit's wall time per cycle
// over the raw floor's (1/ratio is lockkit's share of the raw throughput),
// and cpu-ratio, the same for this process's CPU. b.N cycles run on each
// side.
//
//	go test -run '^$' -bench 'ParallelPair' -benchtime 100000x -count 5 ./lockkit/
func BenchmarkParallelPair(b *testing.B) { benchPair(b, false, false) }

// BenchmarkParallelPairAutoPipelined is BenchmarkParallelPair with lockkit
// on autopipeline.New (the raw floor stays on the plain client).
func BenchmarkParallelPairAutoPipelined(b *testing.B) { benchPair(b, true, false) }

// BenchmarkParallelPairBothAutoPipelined puts the raw floor's commands on
// the same autopipeliner: like for like.
func BenchmarkParallelPairBothAutoPipelined(b *testing.B) { benchPair(b, true, true) }

func benchPair(b *testing.B, kitAP, rawAP bool) {
	rdb := benchRedis(b)
	spec := goredis.New(rdb)
	if kitAP {
		spec = autopipeline.New(rdb)
	}
	var raws redis.Cmdable = rdb
	if rawAP {
		ap, err := rdb.AsyncAutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		raws = ap
	}
	c, err := New(spec)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	d := c.Domain(DomainSpec{Name: "bench", Policy: Policy{TTL: 10 * time.Second}})
	ctx := context.Background()

	raw := func(g int) func() error {
		key := "lock:{bench:baseline:" + strconv.Itoa(g) + "}"
		return func() error {
			token := rand.Text()
			if ok, err := raws.SetNX(ctx, key, token, 10*time.Second).Result(); err != nil || !ok {
				return errOr(err, "raw: SET NX found the key held")
			}
			if n, err := rediswire.ReleaseScript.Run(ctx, raws.(redis.Scripter), []string{key}, token).Int64(); err != nil || n != 1 {
				return errOr(err, "raw: the release deleted nothing")
			}
			return nil
		}
	}
	kit := func(g int) func() error {
		id := strconv.Itoa(g)
		return func() error {
			lease, err := d.Key(8).Literal("bench:").String(id).Lock().TryAcquire(ctx)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}
	}
	sides := [2]func(int) func() error{raw, kit}
	var wall, cpu [2]time.Duration
	done := 0
	b.ResetTimer()
	for slice := 0; done < b.N; slice++ {
		n := min(pairSlice, b.N-done)
		// A B B A: each side goes first in every other pair of slices.
		order := [2]int{0, 1}
		if slice%2 == 1 {
			order = [2]int{1, 0}
		}
		for _, s := range order {
			w, u, err := runSlice(n, sides[s])
			if err != nil {
				b.Fatal(err)
			}
			wall[s] += w
			cpu[s] += u
		}
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(wall[0].Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(wall[1].Nanoseconds())/float64(b.N), "lockkit-ns/op")
	b.ReportMetric(float64(wall[1])/float64(wall[0]), "ratio")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-ratio")
}

// pairSlice is the cycles of one slice of BenchmarkParallelPair: about a
// tenth of a second here, short against the machine's drifts.
const pairSlice = 2000

// runSlice runs n cycles over parallelGoroutines goroutines, each cycle made
// by mk for its goroutine, and returns the wall time and this process's CPU
// they took.
func runSlice(n int, mk func(g int) func() error) (time.Duration, time.Duration, error) {
	var (
		left  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	left.Store(int64(n))
	cycles := make([]func() error, parallelGoroutines)
	for g := range cycles {
		cycles[g] = mk(g)
	}
	start, cpu0 := time.Now(), processCPU()
	for g := range cycles {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := cycles[g](); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	wall, cpu := time.Since(start), processCPU()-cpu0
	if e := first.Load(); e != nil {
		return 0, 0, *e
	}
	return wall, cpu, nil
}

type benchError string

func (e benchError) Error() string { return string(e) }

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return benchError(msg)
}
