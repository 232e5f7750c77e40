package etcd_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/etcd"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
)

// BenchmarkAcquireRelease: one uncontended acquire+release through the
// Client on a 1-member etcd, against etcd's own concurrency.Mutex on the
// same member, interleaved operation by operation (each iteration runs every
// variant once, in an order shuffled each iteration: in a fixed rotation,
// whichever variant followed raw-session, whose Close revokes a lease,
// measured slower) so that the machine's speed changes hit them alike:
//
//	go test ./etcd -run '^$' -bench AcquireRelease -benchtime 2000x -count 3
//
// Variants: raw-mutex (Lock+Unlock on one long-lived Session: one lease for
// every acquisition), raw-session (NewSession+Lock+Unlock+Close: a lease per
// acquisition, as lockkit keeps), lockkit (TryAcquire+Release, no fencing)
// and lockkit-fenced. Metrics: each variant's µs/op, lockkit's ratios to
// both raw variants, and each variant's requests per cycle (rpc/op: unary
// calls and stream messages its etcd client sent during the cycle; a
// background keep-alive or revoke landing in a cycle counts in it).
func BenchmarkAcquireRelease(b *testing.B) {
	c := testserver.StartEtcd(b, 1)
	var sent atomic.Int64
	cli := countingCli(b, c, &sent)
	ctx := context.Background()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	m := concurrency.NewMutex(sess, "bench-raw/")
	lc, err := lockkit.New(etcd.New(countingCli(b, c, &sent)), testOptions(b)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lc.Close(ctxT(b, 10*time.Second)) })
	l := lockOf(lc, "bench", lockkit.Policy{TTL: 10 * time.Second}, "x")
	lf := lockOf(lc, "bench-fenced", lockkit.Policy{TTL: 10 * time.Second, Fencing: true}, "x")
	lockkitOp := func(l lockkit.Lock) func() {
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
	variants := []struct {
		name string
		op   func()
	}{
		{"raw-mutex", func() {
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}},
		{"raw-session", func() {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				b.Fatal(err)
			}
			m := concurrency.NewMutex(s, "bench-session/")
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
		}},
		{"lockkit", lockkitOp(l)},
		{"lockkit-fenced", lockkitOp(lf)},
	}
	total := make([]time.Duration, len(variants))
	rpcs := make([]int64, len(variants))
	for i := range 20 { // warm-up
		variants[i%len(variants)].op()
	}
	n := 0
	order := rand.New(rand.NewPCG(1, 2)) // the same orders in every run
	for b.Loop() {
		for _, k := range order.Perm(len(variants)) {
			before := sent.Load()
			start := time.Now()
			variants[k].op()
			total[k] += time.Since(start)
			rpcs[k] += sent.Load() - before
		}
		n++
	}
	us := func(k int) float64 { return float64(total[k].Microseconds()) / float64(n) }
	for k, v := range variants {
		b.ReportMetric(us(k), v.name+"-us/op")
		b.ReportMetric(float64(rpcs[k])/float64(n), v.name+"-rpc/op")
	}
	b.ReportMetric(us(2)/us(0), "lockkit/raw-mutex")
	b.ReportMetric(us(2)/us(1), "lockkit/raw-session")
	b.ReportMetric(us(3)/us(0), "fenced/raw-mutex")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkContendedFIFO: 16 waiters (4 goroutines on each of 4 clients,
// like 4 replicas) take one key in turn, hold it 1 ms and go again, for 3 s
// per b.N: lockkit with wait fifo, and concurrency.Mutex (each goroutine
// its own Session, as a Session's Mutexes on one prefix share a key):
//
//	go test ./etcd -run '^$' -bench ContendedFIFO -benchtime 1x -count 3
//
// Metrics: cs/s, wait-p50-ms and wait-p99-ms (from the start of an
// acquisition to its grant) and p99 in critical sections (strict FIFO's floor
// is 15).
func BenchmarkContendedFIFO(b *testing.B) {
	c := testserver.StartEtcd(b, 1)
	b.Run("lockkit-fifo", func(b *testing.B) {
		p := lockkit.Policy{TTL: 10 * time.Second, Wait: "fifo", Retry: lockkit.Retry{Attempts: 2, MaxWait: time.Minute}}
		var takers []func(ctx context.Context, fn func()) error
		for range 4 {
			l := lockOf(newClient(b, c), "contended", p, "x")
			for range 4 {
				takers = append(takers, func(ctx context.Context, fn func()) error {
					return l.Do(ctx, func(context.Context, *lockkit.Lease) error { fn(); return nil })
				})
			}
		}
		runContended(b, takers)
	})
	b.Run("raw-mutex", func(b *testing.B) {
		var takers []func(ctx context.Context, fn func()) error
		for range 4 {
			cli := newCli(b, c)
			for range 4 {
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				m := concurrency.NewMutex(s, "contended-raw/")
				takers = append(takers, func(ctx context.Context, fn func()) error {
					if err := m.Lock(ctx); err != nil {
						return err
					}
					fn()
					return m.Unlock(ctx)
				})
			}
		}
		runContended(b, takers)
	})
}

func runContended(b *testing.B, takers []func(ctx context.Context, fn func()) error) {
	const (
		hold = time.Millisecond
		run  = 3 * time.Second
	)
	var (
		mu    sync.Mutex
		waits []time.Duration
		cs    int
	)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), run)
		var wg sync.WaitGroup
		for _, take := range takers {
			wg.Go(func() {
				for ctx.Err() == nil {
					start := time.Now()
					err := take(context.WithoutCancel(ctx), func() {
						w := time.Since(start)
						time.Sleep(hold)
						mu.Lock()
						waits = append(waits, w)
						cs++
						mu.Unlock()
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		cancel()
	}
	slices.Sort(waits)
	q := func(p float64) time.Duration { return waits[min(len(waits)-1, int(p*float64(len(waits))))] }
	per := float64(run) / float64(cs) * float64(b.N)
	b.ReportMetric(float64(cs)/(float64(b.N)*run.Seconds()), "cs/s")
	b.ReportMetric(float64(q(0.5).Microseconds())/1000, "wait-p50-ms")
	b.ReportMetric(float64(q(0.99).Microseconds())/1000, "wait-p99-ms")
	b.ReportMetric(float64(q(0.99))/per, "p99-in-cs")
	b.ReportMetric(0, "ns/op")
}

// countingCli is a clientv3 client on c's members that adds every request it
// sends to *sent: each unary call, and each message sent on a stream (a
// keep-alive on a LeaseKeepAlive stream, a watch request).
func countingCli(b *testing.B, c *testserver.EtcdCluster, sent *atomic.Int64) *clientv3.Client {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		sent.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return countingStream{s, sent}, nil
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cli.Close() })
	return cli
}

type countingStream struct {
	grpc.ClientStream
	sent *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.sent.Add(1)
	return s.ClientStream.SendMsg(m)
}
