package lockkit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/goredis"
	"github.com/lockkit/lockkit/internal/rediswire"
	"github.com/lockkit/lockkit/lockkit"
)

// markNewRedlockNode marks a new Redlock node, which has never served a
// lock, so that it votes at once (docs/deployments.md, "A new Redlock node").
func markNewRedlockNode(ctx context.Context, rdb *redis.Client) {
	if err := rediswire.MarkRedlockNode(ctx, rdb); err != nil {
		log.Fatal(err)
	}
}

// exampleRedis is an in-process Redis, so the examples run (and their output
// is checked) without a server. Use a real go-redis client in production.
func exampleRedis() (*redis.Client, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { rdb.Close(); m.Close() }
}

// A domain bound by hand, as generated code does it: most applications call
// the generated helpers (locks.Table(id)) instead.
func ExampleLock_Do() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	tables := client.Domain(lockkit.DomainSpec{
		Name:    "table",
		Pattern: "table:{id}",
		Policy:  lockkit.Policy{TTL: 10 * time.Second, Fencing: true},
	})
	table12 := tables.Key(8).Literal("table:").String("12").Lock()

	err = table12.Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fmt.Println("holding", lease.Key(), "fence issued:", lease.Fence() > 0)
		return nil
	})
	fmt.Println("Do:", err)
	// Output:
	// holding lock:{table:12} fence issued: true
	// Do: <nil>
}

// Contention is an outcome, not a failure: TryDo reports it as
// ErrNotAcquired and does not run fn.
func ExampleLock_TryDo() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	jobs := client.Domain(lockkit.DomainSpec{Name: "job", Policy: lockkit.Policy{TTL: 30 * time.Second}})
	job := jobs.Key(10).Literal("job:").String("job-42").Lock()

	held, err := job.Acquire(ctx) // another worker holds the job
	if err != nil {
		log.Fatal(err)
	}
	err = job.TryDo(ctx, func(context.Context, *lockkit.Lease) error {
		fmt.Println("processing") // not reached
		return nil
	})
	fmt.Println("skipped:", errors.Is(err, lockkit.ErrNotAcquired))

	fmt.Println("release:", held.Release(ctx))
	// A late second release finds the key no longer holds its token.
	fmt.Println("late release is ErrNotHeld:", errors.Is(held.Release(ctx), lockkit.ErrNotHeld))
	// Output:
	// skipped: true
	// release: <nil>
	// late release is ErrNotHeld: true
}

// The health handler answers 200 while the backend answers and no breaker
// is open, 503 otherwise.
func ExampleClient_Health() {
	rdb, stop := exampleRedis()
	defer stop()
	client, err := lockkit.New(goredis.New(rdb))
	if err != nil {
		log.Fatal(err)
	}
	h := client.Health(context.Background())
	fmt.Println("healthy:", h.Healthy, "breaker:", h.Breakers[0].State)
	// Output:
	// healthy: true breaker: closed
}
