package postgres_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/postgres"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAcquireRelease: one uncontended acquire+release through the
// Client on PostgreSQL, against the raw floor (pg_try_advisory_lock +
// pg_advisory_unlock on a connection held for the whole run), and the same
// through the Client on Redis for comparison, in one run:
//
//	go test ./postgres -run '^$' -bench . -benchtime 2s
func BenchmarkAcquireRelease(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 8)
	const key = "lock:bench"
	id := postgres.KeyID(key)
	b.Run("pg-floor", func(b *testing.B) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		b.ReportAllocs()
		for b.Loop() {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	c := newClient(b, pool)
	srv := testserver.StartRedis(b)
	rc, err := lockkit.New(goredis.New(srv.Client(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rc.Close(context.Background()) })
	for _, tc := range []struct {
		name    string
		c       *lockkit.Client
		fencing bool
	}{{"pg-lockkit", c, false}, {"pg-lockkit-fencing", c, true}, {"redis-lockkit", rc, false}, {"redis-lockkit-fencing", rc, true}} {
		b.Run(tc.name, func(b *testing.B) {
			l := lockOf(tc.c, "bench", lockkit.Policy{TTL: 10 * time.Second, Fencing: tc.fencing}, "x")
			b.ReportAllocs()
			for b.Loop() {
				lease, err := l.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkContended: 16 contenders over 4 clients (4 goroutines each, like
// 4 replicas) take one key in turn, hold it 1ms and go again, for 3s per
// b.N, on Redis and on PostgreSQL side by side, with the Client's default
// polling retry policy:
//
//	go test ./postgres -run '^$' -bench Contended -benchtime 1x
//
// Metrics: cs/s (critical sections per second), wait-p50-ms and wait-p99-ms
// (from the start of an acquisition to its grant), retake-share (grants to
// the goroutine that released last).
func BenchmarkContended(b *testing.B) {
	b.Run("redis", func(b *testing.B) {
		srv := testserver.StartRedis(b)
		runContended(b, func() *lockkit.Client {
			rdb := srv.Client(b, func(o *redis.Options) { o.PoolSize = 6 })
			c, err := lockkit.New(goredis.New(rdb))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(context.Background()) })
			return c
		})
	})
	b.Run("postgres", func(b *testing.B) {
		pg := startPG(b)
		runContended(b, func() *lockkit.Client {
			return newClient(b, testserver.PgxPool(b, pg.DSN(), 6), postgres.WithMaxHeld(5))
		})
	})
}

func runContended(b *testing.B, newC func() *lockkit.Client) {
	const (
		clients, perClient = 4, 4
		hold               = time.Millisecond
		run                = 3 * time.Second
	)
	p := lockkit.Policy{TTL: 10 * time.Second, Retry: lockkit.Retry{Attempts: math.MaxInt32}}
	var locks []lockkit.Lock
	for range clients {
		l := lockOf(newC(), "contended", p, "x")
		for range perClient {
			locks = append(locks, l)
		}
	}
	var (
		mu         sync.Mutex
		waits      []time.Duration
		retakes    int
		failures   int
		lastHolder = -1
	)
	b.ResetTimer()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*run)
	defer cancel()
	var wg sync.WaitGroup
	for id, l := range locks {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				lease, err := l.Acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						if failures++; failures == 1 {
							b.Logf("first failed acquisition: %v", err)
						}
						mu.Unlock()
					}
					continue
				}
				mu.Lock()
				waits = append(waits, time.Since(t0))
				if lastHolder == id {
					retakes++
				}
				lastHolder = id
				mu.Unlock()
				time.Sleep(hold)
				if err := lease.Release(context.Background()); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	n := len(waits)
	if n == 0 {
		b.Fatal("no critical section")
	}
	slices.Sort(waits)
	q := func(f float64) float64 {
		return float64(waits[min(n-1, int(f*float64(n)))]) / float64(time.Millisecond)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "cs/s")
	b.ReportMetric(q(0.50), "wait-p50-ms")
	b.ReportMetric(q(0.99), "wait-p99-ms")
	b.ReportMetric(float64(retakes)/float64(n), "retake-share")
	b.ReportMetric(float64(failures), "failures")
}

// BenchmarkAcquireReleasePaired interleaves the raw floor (pg_try_advisory_lock
// + pg_advisory_unlock on one pooled connection, held for the run) and an
// uncontended TryAcquire + Release through the Client, plain and fencing,
// in every iteration (order rotated), so that a shared machine's drift hits
// all alike, and reports each one's median µs and the median of the
// per-iteration ratios to the floor:
//
//	go test ./postgres -run '^$' -bench AcquireReleasePaired -benchtime 3000x -count 3
func BenchmarkAcquireReleasePaired(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 8)
	c := newClient(b, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	lPlain := lockOf(c, "bench", lockkit.Policy{TTL: 10 * time.Second}, "paired")
	lFence := lockOf(c, "bench-fencing", lockkit.Policy{TTL: 10 * time.Second, Fencing: true}, "paired")
	id := postgres.KeyID("lock:{bench-floor}")
	floor := func() {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	through := func(l lockkit.Lock) func() {
		return func() {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	ops := []func(){floor, through(lPlain), through(lFence)}
	for _, op := range ops { // warm: sessions open, statements prepared
		op()
	}
	var ns [3][]float64
	var ratio [2][]float64
	i := 0
	for b.Loop() {
		var d [3]float64
		for k := range 3 {
			j := (i + k) % 3
			t0 := time.Now()
			ops[j]()
			d[j] = float64(time.Since(t0).Nanoseconds())
		}
		i++
		for j := range 3 {
			ns[j] = append(ns[j], d[j])
		}
		ratio[0] = append(ratio[0], d[1]/d[0])
		ratio[1] = append(ratio[1], d[2]/d[0])
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(med(ns[0])/1e3, "floor-µs")
	b.ReportMetric(med(ns[1])/1e3, "lockkit-µs")
	b.ReportMetric(med(ns[2])/1e3, "fencing-µs")
	b.ReportMetric(med(ratio[0]), "lockkit/floor")
	b.ReportMetric(med(ratio[1]), "fencing/floor")
}
