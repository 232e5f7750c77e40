// Command contender makes a lock contended for a while, with otelsetup.Setup
// exporting its metrics, so that the Prometheus end-to-end test in
// internal/e2e sees lockkit's retry-ratio alert fire on a real server.
//
//	REDIS_URL=redis://127.0.0.1:6379 OTEL_METRICS_EXPORTER=prometheus \
//		OTEL_EXPORTER_PROMETHEUS_PORT=9464 go run ./internal/e2e/cmd/contender -for 30s
//
// -workers goroutines (default 8) each take the table lock of -table in a
// loop with Do, hold it -hold (default 20ms) and go again, for -for (default
// 30s): most acquisitions find the lock held and retry. It exits non-zero if
// export is not configured or a Do fails with anything but contention.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/telemetry/otelsetup"
)

func main() {
	workers := flag.Int("workers", 8, "goroutines contending for the lock")
	hold := flag.Duration("hold", 20*time.Millisecond, "how long each holds it")
	dur := flag.Duration("for", 30*time.Second, "how long to run")
	table := flag.String("table", "e2e-contended", "the table id to lock")
	flag.Parse()
	if err := run(*workers, *hold, *dur, *table); err != nil {
		fmt.Fprintln(os.Stderr, "contender:", err)
		os.Exit(1)
	}
}

func run(workers int, hold, dur time.Duration, table string) (err error) {
	ctx := context.Background()
	if !otelsetup.ExportConfigured() {
		return errors.New("no export configured: set OTEL_METRICS_EXPORTER=prometheus")
	}
	shutdown, err := otelsetup.Setup(ctx, "lockkit-contender")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, shutdown(sctx))
	}()
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	c, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, c.Close(cctx))
	}()
	l := locks.New(c)
	stop := time.Now().Add(dur)
	var done, busy atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				err := l.Table(table).Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
					_ = lease.Fence() // nothing is written: this program only makes contention
					time.Sleep(hold)
					return nil
				})
				switch {
				case err == nil:
					done.Add(1)
				case errors.Is(err, lockkit.ErrNotAcquired):
					busy.Add(1) // gave up after the domain's attempts: contention
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	fmt.Printf("contender: %d sections, %d gave up on contention\n", done.Load(), busy.Load())
	return err
}
