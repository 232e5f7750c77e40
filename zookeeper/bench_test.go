package zookeeper_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/zookeeper"
)

// BenchmarkAcquireRelease: one uncontended acquire+release through the
// Client against the raw recipe on the same server (create an ephemeral
// sequential node, list the children, delete the node, on a connection of
// its own), interleaved round by round (alternating which goes first) so
// that both see the same machine load; ratio is the Client's time over the recipe's:
//
//	go test ./zookeeper -run '^$' -bench AcquireRelease -benchtime 2000x -count 3
func BenchmarkAcquireRelease(b *testing.B) {
	z := startZK(b, 1)
	raw := rawConn(b, z.Servers())
	if _, err := raw.Create("/raw", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.Create("/raw/lock", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	recipe := func() {
		p, err := raw.Create("/raw/lock/n-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := raw.Children("/raw/lock"); err != nil {
			b.Fatal(err)
		}
		if err := raw.Delete(p, -1); err != nil {
			b.Fatal(err)
		}
	}
	c := newClient(b, z.Servers())
	for _, fencing := range []bool{false, true} {
		name := "lockkit"
		if fencing {
			name += "-fencing"
		}
		b.Run(name, func(b *testing.B) {
			l := lockOf(c, "bench", lockkit.Policy{TTL: 10 * time.Second, Fencing: fencing}, "x")
			ctx := context.Background()
			lockkitOp := func() {
				lease, err := l.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			lockkitOp() // the session and the lock's parent
			recipe()
			var tl, tr time.Duration
			b.ResetTimer()
			first := false
			for b.Loop() {
				// Alternate which goes first, so neither always follows
				// the other's writes.
				first = !first
				if first {
					t0 := time.Now()
					lockkitOp()
					t1 := time.Now()
					recipe()
					tl += t1.Sub(t0)
					tr += time.Since(t1)
				} else {
					t0 := time.Now()
					recipe()
					t1 := time.Now()
					lockkitOp()
					tr += t1.Sub(t0)
					tl += time.Since(t1)
				}
			}
			b.ReportMetric(float64(tl.Microseconds())/float64(b.N), "lockkit-µs/op")
			b.ReportMetric(float64(tr.Microseconds())/float64(b.N), "recipe-µs/op")
			b.ReportMetric(float64(tl)/float64(tr), "ratio")
		})
	}
}

// BenchmarkFIFOWait: 16 waiters (over 4 clients) on one wait: fifo key,
// each holding it 1ms and queueing again, for 3s; wait p50/p99 from the
// start of an acquisition to its grant:
//
//	go test ./zookeeper -run '^$' -bench FIFOWait -benchtime 1x -count 3
func BenchmarkFIFOWait(b *testing.B) {
	z := startZK(b, 1)
	const (
		clients, perClient = 4, 4
		hold               = time.Millisecond
		run                = 3 * time.Second
	)
	p := lockkit.Policy{TTL: 10 * time.Second, Wait: "fifo", Retry: lockkit.Retry{Attempts: 2, MaxWait: 30 * time.Second}}
	var locks []lockkit.Lock
	for range clients {
		l := lockOf(newClient(b, z.Servers(), zookeeper.WithRoot("/bench")), "fifo", p, "x")
		for range perClient {
			locks = append(locks, l)
		}
	}
	var (
		mu       sync.Mutex
		waits    []time.Duration
		failures int
	)
	b.ResetTimer()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*run)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range locks {
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
	b.ReportMetric(float64(failures), "failures")
}
