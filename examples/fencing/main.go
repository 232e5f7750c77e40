// Command fencing plays the scenario that makes fencing numbers necessary,
// and shows lockkit's guarded write turning the stale writer away:
//
//  1. A takes the lock on table 12 and gets fence n.
//  2. A is paused (a GC pause, SIGSTOP, a slow disk) for longer than the
//     TTL: its renewals stop, and the lock expires in Redis.
//  3. B takes the lock, gets a higher fence, and books the table.
//  4. A wakes up, still believing it holds the lock, and books the table
//     with fence n: the resource rejects the write with fence.ErrFenced.
//
// The lock is the table domain of ../../lockkit.yaml, through the generated
// helpers in ../locks. Its TTL there is 10s; the demo shortens it to 500ms
// with LOCKKIT_TTL_TABLE unless that is already set.
//
// With REDIS_URL unset it runs on an embedded miniredis; otherwise on that
// Redis (redis://host:port/db):
//
//	go run ./examples/fencing
//	REDIS_URL=redis://localhost:6379/0 go run ./examples/fencing
//
// It exits 1 if any of the facts above does not hold.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lockkit/lockkit/fence"
	"github.com/lockkit/lockkit/goredis"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockkit/lockkit/examples/internal/exampleenv"
	"github.com/lockkit/lockkit/examples/locks"
	"github.com/lockkit/lockkit/lockkit"
)

// bookingKey is the protected resource: a Redis hash written by
// fence.Set, holding the guest and the fence of the last booking.
const bookingKey = "booking:table:12"

func main() {
	if os.Getenv("LOCKKIT_TTL_TABLE") == "" {
		os.Setenv("LOCKKIT_TTL_TABLE", "500ms")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var opts *redis.Options
	if url := os.Getenv("REDIS_URL"); url != "" {
		var err error
		if opts, err = redis.ParseURL(url); err != nil {
			fmt.Fprintf(os.Stderr, "fencing: REDIS_URL: %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("using the Redis at %s (REDIS_URL)\n", opts.Addr)
	} else {
		m, err := startMiniredis()
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencing: %v\n", err)
			os.Exit(1)
		}
		defer m.Close()
		opts = &redis.Options{Addr: m.Addr()}
		fmt.Printf("REDIS_URL is not set: using an embedded miniredis at %s\n", m.Addr())
	}
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintf(os.Stderr, "fencing: %v\n", err)
		os.Exit(1)
	}
}

// startMiniredis starts an in-process miniredis whose keys expire with the
// wall clock, as Redis's do (miniredis's TTLs otherwise wait for
// FastForward).
func startMiniredis() (*miniredis.Miniredis, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("starting miniredis: %w", err)
	}
	m.ClockTTL(true)
	return m, nil
}

// run plays the scenario on the Redis that opts point to, narrating to w. A
// and B are two processes: each has its own go-redis client and lockkit
// client. It returns an error when a fact does not hold.
func run(ctx context.Context, w io.Writer, opts *redis.Options) error {
	rdbA := redis.NewClient(opts)
	defer rdbA.Close()
	pauseA := &exampleenv.Freeze{}
	rdbA.AddHook(pauseA)
	rdbB := redis.NewClient(opts)
	defer rdbB.Close()

	quiet := lockkit.WithLogger(slog.New(slog.DiscardHandler)) // the narration says it all
	// The 500ms TTL of this demo needs a command timeout that leaves each
	// renewal room before the lease's deadline (lockkit refuses a policy
	// that does not).
	fast := lockkit.WithCommandTimeout(200 * time.Millisecond)
	clientA, err := lockkit.New(goredis.New(rdbA), quiet, fast)
	if err != nil {
		return err
	}
	defer clientA.Close(context.WithoutCancel(ctx))
	clientB, err := lockkit.New(goredis.New(rdbB), quiet, fast)
	if err != nil {
		return err
	}
	defer clientB.Close(context.WithoutCancel(ctx))

	// 1. A takes the lock.
	//lockkit-vet:ignore a scenario step: on an error return the deferred client Close releases it
	leaseA, err := locks.New(clientA).Table("12").Acquire(ctx)
	if err != nil {
		return fmt.Errorf("A could not acquire: %w", err)
	}
	fenceA := leaseA.Fence()
	if fenceA <= 0 {
		return fmt.Errorf("A's lease has fence %d: is fencing on for the table domain?", fenceA)
	}
	fmt.Fprintf(w, "A acquired %s with fence %d\n", leaseA.Key(), fenceA)

	// 2. A is paused. In one process we cannot freeze A's goroutines, so
	// A's connection is frozen instead: its renewals stop reaching Redis,
	// as they would if the whole process were stopped.
	pauseA.Stop()
	paused := time.Now()
	fmt.Fprintln(w, "A pauses (a GC pause, SIGSTOP, a slow disk): its renewals stop")
	select {
	case <-leaseA.Done():
	case <-ctx.Done():
		return fmt.Errorf("A's lease outlived its TTL: %w", ctx.Err())
	}
	fmt.Fprintf(w, "A's lease ran out after %v, while A was paused\n", time.Since(paused).Round(time.Millisecond))

	// 3. B takes the lock (retrying until Redis has expired A's key) and books.
	var fenceB int64
	err = locks.New(clientB).Table("12").Do(ctx, func(ctx context.Context, lease *lockkit.Lease) error {
		fenceB = lease.Fence()
		fmt.Fprintf(w, "B acquired %s with fence %d\n", lease.Key(), fenceB)
		if err := fence.Set(ctx, rdbB, bookingKey, "guest B", fenceB); err != nil {
			return fmt.Errorf("B's booking was refused: %w", err)
		}
		fmt.Fprintf(w, "B booked the table with fence %d: accepted\n", fenceB)
		return nil
	})
	if err != nil {
		return err
	}
	if fenceB <= fenceA {
		return fmt.Errorf("B's fence %d is not above A's %d", fenceB, fenceA)
	}

	// 4. A wakes up and writes, unaware that its lease is gone.
	pauseA.Resume()
	fmt.Fprintf(w, "A wakes up after %v and books the table with fence %d\n", time.Since(paused).Round(time.Millisecond), fenceA)
	err = fence.Set(ctx, rdbA, bookingKey, "guest A", fenceA)
	if !errors.Is(err, fence.ErrFenced) {
		return fmt.Errorf("A's stale booking with fence %d was not fenced off: %v", fenceA, err)
	}
	fmt.Fprintf(w, "A's booking was rejected: %v\n", err)

	guest, fence, err := fence.Get(ctx, rdbB, bookingKey)
	if err != nil {
		return err
	}
	if guest != "guest B" || fence != fenceB {
		return fmt.Errorf("%s holds %q with fence %d, want B's booking (fence %d)", bookingKey, guest, fence, fenceB)
	}
	fmt.Fprintf(w, "%s holds %q with fence %d\n", bookingKey, guest, fence)
	return nil
}
