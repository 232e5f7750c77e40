package lockkit_test

import (
	"context"
	"crypto/rand"
	"math"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/fifo"
	"github.com/lockkit/lockkit/internal/testserver"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/redis/go-redis/v9"
)

// The contended scenario of issue 14: 16 goroutines over 4 go-redis clients
// (4 each, like 4 service replicas) take one key in turn, hold it 1ms, give
// it back, and go again, for contendedRun per b.N. One redis-server on
// loopback. Run each variant once:
//
//	go test -run '^$' -bench Contended -benchtime 1x -count 3 ./lockkit/
//
// Custom metrics, per variant:
//
//	cs/s          critical sections per second
//	max-share     cs/s ÷ the theoretical max (1 / the measured mean hold)
//	wait-p50-ms, wait-p99-ms, wait-max-ms
//	              from the start of an acquisition to its grant
//	wait-p99-cs   wait p99 in critical sections (÷ the mean cycle, 1/cs/s):
//	              the machine's speed factored out; strict FIFO with 16
//	              contenders waits for the 15 others, ~15
//	retake-share  grants that went to the goroutine that released last
//	gap-p50-µs    median release-to-next-grant gap (release sent → grant returned)
//	cpu-µs/cs     this process's user+sys CPU (getrusage) per critical section
//	push-share    FIFO only: wake-ups caused by a push; the others are
//	timer-wakes   (fallback timer: a non-head's refresh, or a lost push) and
//	subscribed-wakes (a (re)subscription, each client's first included)
const (
	contendedClients    = 4
	contendedPerClient  = 4
	contendedHold       = time.Millisecond
	contendedRun        = 3 * time.Second
	contendedPollPeriod = 10 * time.Millisecond
)

// A contender takes the lock once: it returns a release func, or an error
// (ctx done included). onWake, when the contender waits by wake-ups, is told
// what ended each wait.
type contender func(ctx context.Context) (release func(), err error)

// newContendedClient is the one place that builds a lockkit.Client, so the
// coming constructor change (lockkit.New(goredis.New(rdb))) is one edit.
func newContendedClient(rdb redis.UniversalClient) (*lockkit.Client, error) {
	return lockkit.New(goredis.New(rdb))
}

func BenchmarkContendedFloorSetNX10ms(b *testing.B) {
	runContended(b, func(b *testing.B, rdb *redis.Client, _ *wakeStats) contender {
		key := "lock:{bench:floor}"
		release := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
		return func(ctx context.Context) (func(), error) {
			tok := rand.Text()
			for {
				ok, err := rdb.SetNX(ctx, key, tok, 10*time.Second).Result()
				if err != nil {
					return nil, err
				}
				if ok {
					return func() { _ = release.Run(context.Background(), rdb, []string{key}, tok).Err() }, nil
				}
				if err := sleepCtx(ctx, jitter(contendedPollPeriod)); err != nil {
					return nil, err
				}
			}
		}
	})
}

func BenchmarkContendedLockkitPolling10ms(b *testing.B) {
	benchLockkit(b, lockkit.Retry{Attempts: math.MaxInt32, Initial: contendedPollPeriod,
		Max: contendedPollPeriod, Multiplier: 1})
}

func BenchmarkContendedLockkitPollingDefault(b *testing.B) {
	benchLockkit(b, lockkit.Retry{Attempts: math.MaxInt32})
}

func benchLockkit(b *testing.B, retry lockkit.Retry) {
	runContended(b, func(b *testing.B, rdb *redis.Client, _ *wakeStats) contender {
		c, err := newContendedClient(rdb)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		lock := c.Domain(lockkit.DomainSpec{Name: "bench", Policy: lockkit.Policy{TTL: 10 * time.Second, Retry: retry}}).
			Key(16).Literal("bench:").String("polling").Lock()
		return func(ctx context.Context) (func(), error) {
			lease, err := lock.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return func() { _ = lease.Release(context.Background()) }, nil
		}
	})
}

// BenchmarkContendedLockkitFIFO is the Client with FIFO waiting
// (Policy.Wait = "fifo"): queue, push wake-up, handover, through the
// breaker, telemetry hooks (off) and lease tracking. TTL 10s: a handover
// gives 2s (the waiter TTL) and the first renewal, ~0.7s later, would
// extend it; a 1ms hold never gets there.
func BenchmarkContendedLockkitFIFO(b *testing.B) {
	runContended(b, func(b *testing.B, rdb *redis.Client, _ *wakeStats) contender {
		c, err := newContendedClient(rdb)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		d := c.Domain(lockkit.DomainSpec{Name: "bench", Policy: lockkit.Policy{TTL: 10 * time.Second, Wait: "fifo",
			Retry: lockkit.Retry{Attempts: 2, MaxWait: time.Minute}}})
		if err := d.Err(); err != nil {
			b.Fatal(err)
		}
		lock := d.Key(16).Literal("bench:").String("fifo").Lock()
		return func(ctx context.Context) (func(), error) {
			lease, err := lock.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return func() { _ = lease.Release(context.Background()) }, nil
		}
	})
}

// BenchmarkContendedFIFO drives internal/fifo by the minimal loop the
// Client's acquire loop follows: Acquire; when queued, subscribe once
// and wait for a push (a release's handover: granted without a round trip)
// or the fallback; Leave on giving up. The Client's overhead is the
// difference from BenchmarkContendedLockkitFIFO.
func BenchmarkContendedFIFO(b *testing.B) {
	const waiterTTL, fallback = 2 * time.Second, 200 * time.Millisecond
	runContended(b, func(b *testing.B, rdb *redis.Client, ws *wakeStats) contender {
		n := fifo.NewNotifier(rdb, fifo.NotifierOptions{})
		b.Cleanup(func() { _ = n.Close() })
		key := "lock:{bench:fifo}"
		wake := n.Channel(key)
		return func(ctx context.Context) (func(), error) {
			tok := rand.Text()
			req := &fifo.Request{Key: key, Token: tok, TTL: 10 * time.Second, WaiterTTL: waiterTTL, Wake: wake}
			var w *fifo.Waiter
			defer func() {
				if w != nil {
					w.Close()
				}
			}()
			for {
				r, err := fifo.Acquire(ctx, rdb, req)
				if err == nil && r.Granted {
					return func() { _, _ = fifo.Release(context.Background(), rdb, key, tok, "") }, nil
				}
				if err == nil {
					if w == nil {
						w = n.Subscribe(key, tok)
					}
					var k fifo.Wake
					if k, err = w.Wait(ctx, r.Fallback(fallback)); err == nil {
						ws.add(k)
						if _, ok := w.Granted(); ok { // handed over: no round trip
							return func() { _, _ = fifo.Release(context.Background(), rdb, key, tok, "") }, nil
						}
					}
				}
				if err != nil {
					lctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = fifo.Leave(lctx, rdb, key, tok)
					cancel()
					return nil, err
				}
			}
		}
	})
}

type wakeStats struct {
	mu                     sync.Mutex
	push, timer, subscribe int
}

func (s *wakeStats) add(k fifo.Wake) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch k {
	case fifo.WakePush:
		s.push++
	case fifo.WakeSubscribed:
		s.subscribe++
	default:
		s.timer++
	}
}

func runContended(b *testing.B, setup func(b *testing.B, rdb *redis.Client, ws *wakeStats) contender) {
	testserver.RequireRedis(b)
	srv := testserver.StartRedis(b)
	ws := &wakeStats{}
	var contenders []contender
	for range contendedClients {
		rdb := srv.Client(b, func(o *redis.Options) {
			o.PoolSize = contendedPerClient + 2
			o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second // a loaded machine is slow, not broken
		})
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		c := setup(b, rdb, ws)
		for range contendedPerClient {
			contenders = append(contenders, c)
		}
	}
	var (
		mu          sync.Mutex
		waits       []time.Duration
		gaps        []time.Duration
		holds       time.Duration
		retakes     int
		failures    int
		lastHolder  = -1
		lastRelease time.Time
	)
	b.ResetTimer()
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.N)*contendedRun)
	defer cancel()
	var wg sync.WaitGroup
	for id, c := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				release, err := c(ctx)
				if err != nil {
					if dl, _ := ctx.Deadline(); ctx.Err() != nil || !time.Now().Before(dl) {
						return // the run is over (a command cut by its deadline included)
					}
					// Not contention: a command failed (on a loaded machine,
					// say a read timeout). Counted and shown, not fatal.
					mu.Lock()
					if failures++; failures == 1 {
						b.Logf("first failed acquisition: %v", err)
					}
					mu.Unlock()
					continue
				}
				granted := time.Now()
				mu.Lock()
				waits = append(waits, granted.Sub(t0))
				if lastHolder >= 0 {
					gaps = append(gaps, granted.Sub(lastRelease))
				}
				if lastHolder == id {
					retakes++
				}
				lastHolder = id
				mu.Unlock()
				time.Sleep(contendedHold)
				mu.Lock()
				lastRelease = time.Now()
				holds += lastRelease.Sub(granted)
				mu.Unlock()
				release()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	b.StopTimer()

	n := len(waits)
	if n == 0 {
		b.Fatal("no critical section")
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	slices.Sort(waits)
	slices.Sort(gaps)
	meanHold := holds / time.Duration(n)
	csps := float64(n) / elapsed.Seconds()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(csps, "cs/s")
	b.ReportMetric(csps*meanHold.Seconds(), "max-share")
	b.ReportMetric(ms(quantile(waits, 0.50)), "wait-p50-ms")
	b.ReportMetric(ms(quantile(waits, 0.99)), "wait-p99-ms")
	b.ReportMetric(ms(waits[n-1]), "wait-max-ms")
	b.ReportMetric(quantile(waits, 0.99).Seconds()*csps, "wait-p99-cs")
	b.ReportMetric(float64(retakes)/float64(n), "retake-share")
	if len(gaps) > 0 {
		b.ReportMetric(float64(quantile(gaps, 0.50))/float64(time.Microsecond), "gap-p50-µs")
	}
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(n), "cpu-µs/cs")
	b.ReportMetric(float64(failures), "failures")
	ws.mu.Lock()
	if total := ws.push + ws.timer + ws.subscribe; total > 0 {
		b.ReportMetric(float64(ws.push)/float64(total), "push-share")
		b.ReportMetric(float64(ws.timer), "timer-wakes")
		b.ReportMetric(float64(ws.subscribe), "subscribed-wakes")
	}
	ws.mu.Unlock()
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func jitter(d time.Duration) time.Duration {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return d/2 + time.Duration(float64(d)*float64(b[0])/255)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
