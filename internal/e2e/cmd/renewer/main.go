// Command renewer holds one lock of the table domain for longer than its
// renew interval, with otelsetup.Setup exporting its traces, so that the
// end-to-end test in internal/e2e finds successful lockkit.renew spans in
// Jaeger. The booking example's holds are too short to renew.
//
//	REDIS_URL=redis://127.0.0.1:6379 OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \
//		go run ./internal/e2e/cmd/renewer
//
// It runs under LOCKKIT_TTL_TABLE (default here 900ms, so renewals come every
// 300ms) and holds the lock for -hold (default 1s). With -leaders it then
// runs two terms of the cron_leader election "e2e": A leads, B campaigns
// and loses rounds, A resigns and B leads, so that B's term span links to
// A's. It exits non-zero if export is not configured or anything fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/lockkit"
	"github.com/lockkit/lockkit/telemetry/otelsetup"
)

func main() {
	hold := flag.Duration("hold", time.Second, "how long to hold the lock")
	table := flag.String("table", "e2e-renew", "the table id to lock")
	leaders := flag.Bool("leaders", false, "then run two terms of an election, A then B")
	flag.Parse()
	if err := run(*hold, *table, *leaders); err != nil {
		fmt.Fprintln(os.Stderr, "renewer:", err)
		os.Exit(1)
	}
}

func run(hold time.Duration, table string, leaders bool) (err error) {
	ctx := context.Background()
	if !otelsetup.ExportConfigured() {
		return errors.New("no OTLP export configured: set OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	shutdown, err := otelsetup.Setup(ctx, "lockkit-renewer")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, shutdown(sctx))
	}()

	if os.Getenv("LOCKKIT_TTL_TABLE") == "" {
		if err := os.Setenv("LOCKKIT_TTL_TABLE", "900ms"); err != nil {
			return err
		}
	}
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
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

	if err := renew(ctx, c, hold, table); err != nil {
		return err
	}
	if leaders {
		return handover(ctx, c)
	}
	return nil
}

func renew(ctx context.Context, c *lockkit.Client, hold time.Duration, table string) error {
	tr := otel.Tracer("github.com/lockkit/lockkit/internal/e2e/cmd/renewer")
	ctx, span := tr.Start(ctx, "long job", trace.WithAttributes(attribute.String("table", table)))
	defer span.End()
	return locks.New(c).Table(table).Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		_, work := tr.Start(ctx, "work")
		defer work.End()
		select {
		case <-time.After(hold):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		fmt.Printf("held %s for %v (fence %d)\n", lease.Key(), hold, lease.Fence())
		return nil
	})
}

// handover runs two terms of the election: A leads until B has lost a round
// of its campaign (the domain's retry: 5 attempts, at most about 1.5s),
// then resigns, and B leads. Each term is a trace of its own.
func handover(ctx context.Context, c *lockkit.Client) error {
	e := locks.New(c).CronLeader("e2e")
	leading, resign := make(chan struct{}), make(chan struct{})
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() {
		errA <- e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
			fmt.Printf("A leads term %d\n", term.Number())
			close(leading)
			<-resign
			return nil
		})
	}()
	<-leading
	go func() {
		errB <- e.Lead(ctx, func(ctx context.Context, term *lockkit.Term) error {
			fmt.Printf("B leads term %d\n", term.Number())
			return nil
		})
	}()
	time.Sleep(2500 * time.Millisecond)
	close(resign)
	return errors.Join(<-errA, <-errB)
}
