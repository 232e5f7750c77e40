package pgbackend_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockkit/lockkit/driver"
	"github.com/lockkit/lockkit/internal/pgbackend"
	"github.com/lockkit/lockkit/internal/testserver"
)

// TestWaitStrategies measures, rather than asserts, how contenders wait: 16
// of them over 4 pools (one backend per pool), 1 ms holds, for a few seconds
// per strategy; each contender asks again right after it releases. Run it
// with
//
//	LOCKKIT_PG_WAIT=1 go test ./internal/pgbackend -run TestWaitStrategies -v
//
// Strategies: polling with the Client's default backoff (50ms initial, x2,
// 1s cap, jitter 0.5), polling with a fast backoff (1ms initial, x2, 50ms
// cap), and PostgreSQL's queue (AcquireWait).
func TestWaitStrategies(t *testing.T) {
	if os.Getenv("LOCKKIT_PG_WAIT") == "" {
		t.Skip("a measurement: set LOCKKIT_PG_WAIT=1 to run it")
	}
	pg := startPG(t)
	dur := 3 * time.Second
	if s := os.Getenv("LOCKKIT_PG_WAIT_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	type poll struct{ initial, max time.Duration }
	for _, s := range []struct {
		name string
		poll *poll // nil: queue
	}{
		{"poll-client-default", &poll{50 * time.Millisecond, time.Second}},
		{"poll-fast", &poll{time.Millisecond, 50 * time.Millisecond}},
		{"queue", nil},
	} {
		var bs []*pgbackend.Backend
		for range 4 {
			pool := testserver.PgxPool(t, pg.DSN(), 6)
			bs = append(bs, newBackend(t, pool, pgbackend.Options{MaxHeld: 6, ConnWait: 5 * time.Second}))
		}
		key := "lock:wait-" + s.name
		var (
			mu         sync.Mutex
			waits      []time.Duration
			grants     int
			retakes    int
			lastHolder = -1
			attempts   atomic.Int64
			errs       atomic.Int64
			wg         sync.WaitGroup
		)
		start := time.Now()
		stop := start.Add(dur)
		for g := range 16 {
			b := bs[g%4]
			wg.Go(func() {
				for time.Now().Before(stop) {
					asked := time.Now()
					r := req(key, 10*time.Second, true)
					interval := time.Duration(0)
					if s.poll != nil {
						interval = s.poll.initial
					}
					for {
						attempts.Add(1)
						var err error
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						if s.poll == nil {
							_, _, err = b.AcquireWait(ctx, r, time.Until(stop)+time.Second)
						} else {
							_, err = b.Acquire(ctx, r)
						}
						cancel()
						if err == nil {
							break
						}
						if !errors.Is(err, driver.ErrContended) {
							errs.Add(1)
						}
						if time.Now().After(stop) {
							return
						}
						if s.poll != nil {
							jit := 1 + 0.5*(2*rand.Float64()-1)
							time.Sleep(time.Duration(float64(interval) * jit))
							interval = min(2*interval, s.poll.max)
						}
					}
					w := time.Since(asked)
					mu.Lock()
					waits = append(waits, w)
					grants++
					if lastHolder == g {
						retakes++
					}
					lastHolder = g
					mu.Unlock()
					time.Sleep(time.Millisecond)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if held, err := b.Release(ctx, r.Key, r.Token); !held || err != nil {
						errs.Add(1)
					}
					cancel()
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(waits)
		q := func(p float64) time.Duration {
			if len(waits) == 0 {
				return 0
			}
			return waits[min(len(waits)-1, int(p*float64(len(waits))))].Round(100 * time.Microsecond)
		}
		t.Logf("%-20s %6.0f CS/s  wait p50 %8v  p99 %8v  max %8v  releaser re-takes %3.0f%%  attempts/grant %5.1f  errors %d",
			s.name, float64(grants)/elapsed.Seconds(), q(0.5), q(0.99), q(1), 100*float64(retakes)/float64(max(grants, 1)),
			float64(attempts.Load())/float64(max(grants, 1)), errs.Load())
		for _, b := range bs {
			_ = b.Close()
		}
	}
}
