package pgbackend_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/rs/zerolog"
)

// BenchmarkAcquireRelease: one uncontended acquire+release through the
// backend, against the raw floor (pg_try_advisory_lock + pg_advisory_unlock
// on a connection held for the whole run), on one server, in one run.
//
//	go test ./internal/pgbackend -run '^$' -bench . -benchmem
func BenchmarkAcquireRelease(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 4)
	be := newBackend(b, pool, pgbackend.Options{})
	const key = "lock:bench"
	id := pgbackend.KeyID(key)

	b.Run("floor", func(b *testing.B) {
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
	for _, fencing := range []bool{false, true} {
		name := "backend"
		if fencing {
			name = "backend-fencing"
		}
		b.Run(name, func(b *testing.B) {
			r := &driver.Request{Key: key, Token: "bench", TTL: 10 * time.Second, Fencing: fencing}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := be.Acquire(ctx, r); err != nil {
					b.Fatal(err)
				}
				if held, err := be.Release(ctx, key, r.Token); !held || err != nil {
					b.Fatal(held, err)
				}
			}
		})
	}
}

// BenchmarkExtend: the liveness query (pg_locks for this session's lock)
// against the cheapest statement on the same session.
func BenchmarkExtend(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 4)
	be := newBackend(b, pool, pgbackend.Options{})
	r := &driver.Request{Key: "lock:bench-extend", Token: "bench", TTL: 10 * time.Second}
	if _, err := be.Acquire(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.Run("select1", func(b *testing.B) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		for b.Loop() {
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("backend", func(b *testing.B) {
		for b.Loop() {
			if held, err := be.Extend(ctx, r.Key, r.Token, r.TTL); !held || err != nil {
				b.Fatal(held, err)
			}
		}
	})
}

// BenchmarkParallel16 measures the choice of how leases hold connections:
// 16 goroutines, each taking and giving back its own key, either through the
// backend (a dedicated pool connection per lease) or on one shared session
// guarded by a mutex (the floor of multiplexing many locks over one session,
// before any in-process exclusion map).
func BenchmarkParallel16(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	var seq atomic.Int64
	b.Run("dedicated", func(b *testing.B) {
		pool := testserver.PgxPool(b, pg.DSN(), 16)
		warm(b, pool, 16)
		be := newBackend(b, pool, pgbackend.Options{MaxHeld: 16, ConnWait: 10 * time.Second})
		b.SetParallelism(8) // 16 goroutines on 2 CPUs
		b.ResetTimer()
		b.RunParallel(func(p *testing.PB) {
			r := &driver.Request{Key: fmt.Sprint("lock:par-", seq.Add(1)), Token: "bench", TTL: 10 * time.Second}
			for p.Next() {
				if _, err := be.Acquire(ctx, r); err != nil {
					b.Error(err)
					return
				}
				if _, err := be.Release(ctx, r.Key, r.Token); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("shared-session", func(b *testing.B) {
		pool := testserver.PgxPool(b, pg.DSN(), 1)
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		var mu sync.Mutex
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(p *testing.PB) {
			id := pgbackend.KeyID(fmt.Sprint("lock:par-", seq.Add(1)))
			for p.Next() {
				var ok bool
				mu.Lock()
				err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok)
				mu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				err = conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
				mu.Unlock()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// warm opens n connections in pool before a measurement.
func warm(b *testing.B, pool *pgxpool.Pool, n int) {
	var conns []*pgxpool.Conn
	for range n {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// BenchmarkAcquireReleasePaired interleaves the floor, the backend and the
// fencing backend in every iteration, so that a shared machine's drift hits
// all three alike, and reports each one's median µs and the median of the
// per-iteration ratios to the floor.
func BenchmarkAcquireReleasePaired(b *testing.B) {
	pg := startPG(b)
	ctx := context.Background()
	pool := testserver.PgxPool(b, pg.DSN(), 4)
	warm(b, pool, 4)
	be := newBackend(b, pool, pgbackend.Options{})
	const key = "lock:bench-paired"
	id := pgbackend.KeyID(key)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	rPlain := &driver.Request{Key: key, Token: "bench", TTL: 10 * time.Second}
	rFence := &driver.Request{Key: key, Token: "bench", TTL: 10 * time.Second, Fencing: true}
	floor := func() {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	through := func(r *driver.Request) func() {
		return func() {
			if _, err := be.Acquire(ctx, r); err != nil {
				b.Fatal(err)
			}
			if held, err := be.Release(ctx, key, r.Token); !held || err != nil {
				b.Fatal(held, err)
			}
		}
	}
	ops := []func(){floor, through(rPlain), through(rFence)}
	var ns [3][]float64
	var ratio [2][]float64
	i := 0
	for b.Loop() {
		var d [3]float64
		for k := range 3 {
			j := (i + k) % 3 // rotate the order
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
	b.ReportMetric(med(ns[0])/1e3, "floor-µs")
	b.ReportMetric(med(ns[1])/1e3, "backend-µs")
	b.ReportMetric(med(ns[2])/1e3, "fencing-µs")
	b.ReportMetric(med(ratio[0]), "backend/floor")
	b.ReportMetric(med(ratio[1]), "fencing/floor")
}

// BenchmarkParallel16Paired is BenchmarkParallel16 with the two ways
// interleaved: each iteration runs a block of 16 goroutines × 10
// acquire+release through dedicated connections, then the same on one shared
// session (order rotated), and reports the median µs per acquire+release of
// each and the median of the per-iteration ratios.
//
// "loopback" is direct; "reply+1ms" goes through an in-process toxiproxy
// that delays every reply by 1ms, as a network between the application and
// the server would.
func BenchmarkParallel16Paired(b *testing.B) {
	pg := startPG(b)
	b.Run("loopback", func(b *testing.B) { benchParallel16Paired(b, pg.DSN()) })
	b.Run("reply+1ms", func(b *testing.B) {
		srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
		proxy := toxiproxy.NewProxy(srv, "pg", "127.0.0.1:0", pg.Addr())
		if err := proxy.Start(); err != nil {
			b.Fatal(err)
		}
		defer proxy.Stop()
		js := `{"name":"delay","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":1}}`
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			b.Fatal(err)
		}
		benchParallel16Paired(b, strings.Replace(pg.DSN(), pg.Addr(), proxy.Listen, 1))
	})
}

func benchParallel16Paired(b *testing.B, dsn string) {
	ctx := context.Background()
	pool := testserver.PgxPool(b, dsn, 17)
	warm(b, pool, 17)
	be := newBackend(b, pool, pgbackend.Options{MaxHeld: 16, ConnWait: 10 * time.Second})
	shared, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer shared.Release()
	var mu sync.Mutex
	const goroutines, per = 16, 10
	dedicated := func(g int) error {
		r := &driver.Request{Key: fmt.Sprint("lock:pair-", g), Token: "bench", TTL: 10 * time.Second}
		for range per {
			if _, err := be.Acquire(ctx, r); err != nil {
				return err
			}
			if _, err := be.Release(ctx, r.Key, r.Token); err != nil {
				return err
			}
		}
		return nil
	}
	sharedOp := func(g int) error {
		id := pgbackend.KeyID(fmt.Sprint("lock:pair-", g))
		for range per {
			var ok bool
			for _, q := range []string{"SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"} {
				mu.Lock()
				err := shared.QueryRow(ctx, q, id).Scan(&ok)
				mu.Unlock()
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	block := func(op func(int) error) float64 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for g := range goroutines {
			wg.Go(func() {
				if err := op(g); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		return float64(time.Since(t0).Nanoseconds()) / (goroutines * per)
	}
	var d, s, ratio []float64
	i := 0
	for b.Loop() {
		var dd, ss float64
		if i%2 == 0 {
			dd, ss = block(dedicated), block(sharedOp)
		} else {
			ss, dd = block(sharedOp), block(dedicated)
		}
		i++
		d, s, ratio = append(d, dd), append(s, ss), append(ratio, ss/dd)
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(med(d)/1e3, "dedicated-µs/op")
	b.ReportMetric(med(s)/1e3, "shared-µs/op")
	b.ReportMetric(med(ratio), "shared/dedicated")
}
